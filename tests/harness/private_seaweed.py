"""A SeaweedFS of a test's own: its own home, its own block of ports, started and stopped with the devstack's
launcher (devstack/seaweed.py), so a test may stop it (SIGSTOP), kill it (kill -9) and start it again on the
same data without touching the S3 store the other tests share. Only the store: Kafka and Cassandra stay the
shared ones."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from spotreel.platform import ports as portlib
from spotreel.platform.processes import group_members
from spotreel.devstack.seaweed import Seaweed
from spotreel.devstack.settings import DevstackSettings
from tests.harness.private_stack import private_settings


@dataclass
class PrivateSeaweed:
    settings: DevstackSettings
    say: Callable[[str], None] = lambda line: None

    @property
    def server(self) -> Seaweed:
        return Seaweed(self.settings)

    @property
    def endpoint(self) -> str:
        return self.settings.local_s3_endpoint

    @property
    def env(self) -> dict[str, str]:
        """What points a process (worker, janitor) at this store and nothing else."""
        return {"SPOTREEL_S3_ENDPOINT_URL": self.endpoint}

    def start(self) -> None:
        self.server.ensure_up(self.say)

    def pid(self) -> int:
        running = self.server.running()
        assert running is not None, "the private SeaweedFS is not running"
        return running.pid

    def pause(self) -> None:
        os.killpg(self.pid(), signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid(), signal.SIGCONT)

    def kill9(self, timeout: float = 30.0) -> None:
        pid = self.pid()
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while group_members(pid):
            assert time.monotonic() < deadline, f"SeaweedFS (group {pid}) survived SIGKILL for {timeout} s"
            time.sleep(0.05)

    def client(self, **overrides: Any):
        """The project's own S3 client (spotreel.platform.s3) on this store; `overrides`: Settings fields."""
        from spotreel.platform.s3 import s3_client

        return s3_client(replace(self.settings, **overrides))

    def stop(self) -> None:
        try:
            self.resume()  # a stopped process group would not see the SIGTERM
        except (AssertionError, ProcessLookupError):
            pass
        self.server.stop(self.say)

    def listening(self) -> list[int]:
        return [p for p in self.server.ports() if portlib.listening(self.settings.host, p, timeout=0.3)]


def start_private_seaweed(home: Path, say: Callable[[str], None] = lambda line: None,
                          rng: random.Random | None = None) -> Iterator[PrivateSeaweed]:
    """Generator for a fixture: a started private store; stopped afterwards, and proved gone (no listener)."""
    store = PrivateSeaweed(private_settings(home, rng), say)
    try:
        store.start()
        yield store
    finally:
        store.stop()
        deadline = time.monotonic() + 30
        while store.listening() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not store.listening(), f"the private SeaweedFS left listeners on {store.listening()}"
