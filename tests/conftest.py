"""Session-wide test harness: markers by directory, hypothesis profiles, the session's own checks
(tests/harness/suite_checks.py) and the real servers for integration tests.

A test that needs a server and cannot get one FAILS; nothing here ever skips.

Hypothesis profiles, chosen by HYPOTHESIS_PROFILE: `ci` (the default when CI is set) runs 50 examples per
property and no per-example deadline (a busy 2-core machine makes deadlines flaky); `dev` (the default
otherwise) is hypothesis's own 100 examples, without a deadline either; `deep` runs 2,000 examples for a
search on demand (`HYPOTHESIS_PROFILE=deep make test-unit`). A test that sets `max_examples` itself keeps it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import settings as hypothesis_settings

from spotreel.settings import Settings
from tests.harness.stack import Endpoints, StackUnavailable, container_stack, docker_reachable, local_stack

pytest_plugins = ("tests.harness.suite_checks",)

hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.register_profile("ci", max_examples=50, deadline=None, print_blob=True)
hypothesis_settings.register_profile("deep", max_examples=2000, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

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
