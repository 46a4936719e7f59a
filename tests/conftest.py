"""Session-wide test harness: markers by directory, hypothesis profiles, the session's own checks
(tests/harness/suite_checks.py) and the real servers for integration tests.

A test that needs a server and cannot get one FAILS; nothing here ever skips.
Hypothesis profiles (`ci`, `dev`, `deep`): tests/harness/hypothesis_profiles.py.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from spotreel.config.settings import Settings
from tests.harness import hypothesis_profiles
from tests.harness.stack import Endpoints, StackUnavailable, container_stack, docker_reachable, local_stack

pytest_plugins = ("tests.harness.suite_checks",)

hypothesis_profiles.load()

# Every worker a test starts reads no cloud's notices unless the test points it at a metadata server of its
# own on 127.0.0.1: on a cloud CI runner `auto` would find the real cloud and talk to its link-local address.
os.environ["SPOTREEL_CLOUD_NOTICES"] = "off"

_MARK_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e", "chaos": "chaos"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            top = Path(item.fspath).relative_to(root).parts[0]
        except ValueError:
            continue
        marker = _MARK_BY_DIR.get(top)
        # Not `marker in item.keywords`: the directory's own name is a keyword of every test in it, so that
        # test was always true and `-m unit` (make test-unit, make test-integration) selected nothing.
        if marker and item.get_closest_marker(marker) is None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Endpoints]:
    try:
        if docker_reachable():
            with container_stack(settings) as endpoints:
                yield endpoints
            return
        yield local_stack(settings)
    except StackUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def unique() -> str:
    """A short unique token for topic, keyspace, bucket and group names, so tests never share state."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def tiny_model_dir(settings: Settings) -> Path:
    """The project's tiny text-to-video model, built once into the cache (deterministic, idempotent)."""
    from spotreel.worker.model_tiny import ensure_tiny_model

    return ensure_tiny_model(settings.cache_dir)


@pytest.fixture
def imds_mock(settings: Settings, tmp_path: Path):
    """A factory of AWS EC2 metadata mocks on 127.0.0.1 (tests/harness/imds_mock.py, start_imds_mock's
    keyword arguments: spot_after_s, rebalance_after_s, action, action_time, port), all stopped at the end."""
    from tests.harness.imds_mock import start_imds_mock

    started = []

    def start(**plan):
        mock = start_imds_mock(settings, tmp_path / f"imds-{len(started)}", **plan)
        started.append(mock)
        return mock

    yield start
    for mock in started:
        mock.stop()
