"""The demo's worker: a real `spotreel worker --once` in its own session, stdout (one JSON line per
event) and stderr (its log) appended to one file, always stopped and reaped by `stop`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spotreel.demo.errors import DemoError
from spotreel.devstack.services import settings_env
from spotreel.config.settings import Settings

# One torch thread: on 2 cores shared with Kafka, Cassandra and the services, two threads wait on each other
# whenever a core is taken, so their step time swings (up to several times one thread's); one is steady.
THREADS = 1
# The worker's own SIGTERM deadline (emergency checkpoint + release); `stop` waits a little longer.
GRACE_SECONDS = 10.0


class BackgroundWorker:
    def __init__(self, proc: subprocess.Popen, log_path: Path, log_start: int) -> None:
        self.proc = proc
        self.log_path = log_path
        self._offset = log_start
        self._partial = b""
        self._events: list[dict[str, Any]] = []

    @classmethod
    def start(cls, settings: Settings, pool: str, worker_id: str, log_path: Path) -> "BackgroundWorker":
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "spotreel.cli", "worker", "--once", "--pool", pool, "--worker-id", worker_id,
                "--threads", str(THREADS), "--grace", str(GRACE_SECONDS)]
        env = dict(os.environ, **settings_env(settings), PYTHONUNBUFFERED="1")
        with open(log_path, "ab") as log:
            start = log.tell()
            log.write(f"--- spotreel demo {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv[1:])}\n".encode())
            log.flush()
            try:
                # A session of its own: a Ctrl-C meant for the demo reaches the worker only through `stop`,
                # so the demo decides the order of shutdown.
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                        start_new_session=True)
            except OSError as exc:
                raise DemoError(f"cannot start the worker ({exc}); log: {log_path}") from None
        return cls(proc, log_path, start)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def events(self) -> list[dict[str, Any]]:
        """The worker's JSON event lines written so far (this run's only)."""
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            if raw.startswith(b"{"):
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict) and "event" in line:
                    self._events.append(line)
        return list(self._events)

    def find(self, event: str, **match: Any) -> dict[str, Any] | None:
        for line in self.events():
            if line["event"] == event and all(line.get(k) == v for k, v in match.items()):
                return line
        return None

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        """SIGTERM (the worker checkpoints and hands its lease back), SIGKILL past the grace; reaped either
        way. A second Ctrl-C while waiting kills at once."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                if self.wait_exit(GRACE_SECONDS + 5) is None:
                    self._signal(signal.SIGKILL)
            except KeyboardInterrupt:
                self._signal(signal.SIGKILL)
        return self.proc.wait()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
