"""AWS's EC2 metadata mock for one test: built on first use (devstack/imds_mock.py), started on a free
127.0.0.1 port with the notices the test asks for, stopped at the test's end.

    def test_x(imds_mock):                        # the fixture of tests/conftest.py
        mock = imds_mock(spot_after_s=5)          # notice 5 s after the mock's start; no rebalance
        env = {**os.environ, **mock.worker_env()} # what a `spotreel worker` needs to read it

Outside pytest: `with running_imds_mock(settings, workdir, spot_after_s=5) as mock: ...`.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from spotreel.devstack.imds_mock import ImdsMock, ensure_built
from spotreel.platform.ports import free_port
from spotreel.config.settings import Settings


class TestImdsMock(ImdsMock):
    __test__ = False  # not a test class, whatever its name

    def worker_env(self, poll_s: float = 1.0) -> dict[str, str]:
        """The variables that make `spotreel worker` read this mock's AWS notices every `poll_s` seconds."""
        return {"SPOTREEL_CLOUD_NOTICES": "aws", "SPOTREEL_METADATA_ENDPOINT": self.url,
                "SPOTREEL_WORKER_NOTICE_POLL": str(poll_s)}


def start_imds_mock(settings: Settings, workdir: Path, *, spot_after_s: int | None = None,
                    rebalance_after_s: int | None = None, action: str = "terminate", action_time: str | None = None,
                    port: int | None = None) -> TestImdsMock:
    """A started mock (health-checked: it hands out IMDSv2 tokens). Stop it with `.stop()`."""
    return TestImdsMock(ensure_built(settings), port or free_port(settings.host), workdir, spot_after_s=spot_after_s,
                        rebalance_after_s=rebalance_after_s, action=action, action_time=action_time).start()


@contextmanager
def running_imds_mock(settings: Settings, workdir: Path, **plan) -> Iterator[TestImdsMock]:
    mock = start_imds_mock(settings, workdir, **plan)
    try:
        yield mock
    finally:
        mock.stop()
