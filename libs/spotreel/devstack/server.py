"""What every locally run component shares: pid file, ports, logs, start, wait-until-it-answers, stop.

A component subclasses `Server` and supplies its command line, its probe and its one-time setup. The
status report and `up`/`down` only speak this interface, so later services (gateway, scheduler,
projector) join the stack by adding a subclass to `stack.components`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from spotreel.platform import ports as portlib
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.devstack.layout import Layout
from spotreel.devstack.loggist import LogMark, gist
from spotreel.platform.processes import Running, read_pidfile, spawn, stop_group
from spotreel.devstack.settings import launcher_settings
from spotreel.config.settings import Settings

Say = Callable[[str], None]


class Server:
    name: str = "server"
    # Log lines that look alarming but are expected (never shown as the reason for a failure).
    harmless: tuple[str, ...] = ()
    # A spotreel service (scheduler, projector, gateway): started after every server answers, stopped first,
    # and not something `provision` waits for on servers someone else runs.
    service: bool = False
    # How long a fresh start waits for another process to let go of one of its ports before refusing.
    port_grace_s: float = 5.0

    def __init__(self, settings: Settings) -> None:
        self.settings = launcher_settings(settings)
        self.layout = Layout.of(settings)

    # --- supplied by each component -------------------------------------------------------------
    def address(self) -> str:
        raise NotImplementedError

    def ports(self) -> list[int]:
        raise NotImplementedError

    def main_log(self) -> Path:
        """The log a person should read first."""
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe(self, timeout: float) -> str:
        """A real request (not just a TCP connect); returns a short detail, raises ProbeFailed."""
        raise NotImplementedError

    def prepare(self, say: Say) -> None:
        """Write configs, format storage: whatever must exist before the process starts."""

    def setup(self, say: Say) -> None:
        """Idempotent work once it answers (topics, buckets, schema)."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def bind_host(self) -> str:
        """The address its ports are bound on (a Cassandra node of the cluster profile has its own 127.0.0.n)."""
        return self.settings.host

    # --- shared ---------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.layout.data(self.name)

    @property
    def logs_dir(self) -> Path:
        return self.layout.logs(self.name)

    @property
    def conf_dir(self) -> Path:
        return self.layout.conf(self.name)

    @property
    def stdout_log(self) -> Path:
        return self.logs_dir / "stdout.log"

    def logs(self) -> list[Path]:
        return list(dict.fromkeys([self.main_log(), self.stdout_log]))

    def pidfile(self) -> Path:
        return self.layout.pidfile(self.name)

    def running(self) -> Running | None:
        return read_pidfile(self.pidfile())

    def port_conflicts(self) -> list[tuple[str, str]]:
        """(message, holder) per port that something else holds; checked before anything is started."""
        found = []
        for port in self.ports():
            if portlib.bindable(self.bind_host(), port):
                continue
            who = portlib.holder(port)
            found.append((f"{self.name}: port {port} on {self.bind_host()} is already in use by another process",
                          f"held by pid {who[0]}: {who[1]}" if who else ""))
        return found

    def preflight(self) -> None:
        """Cheap checks (binaries present) so a missing tool fails before anything is started."""

    def ensure_up(self, say: Say) -> bool:
        """Bring it to answering; True when this call started it, False when it already ran."""
        t0 = time.monotonic()
        running = self.running()
        if running is not None:
            try:
                self.probe(3.0)
                say(f"{self.name}: already running at {self.address()} (pid {running.pid})")
                self.setup(say)
                return False
            except ProbeFailed:
                say(f"{self.name}: running (pid {running.pid}) but not answering yet; waiting")
                self._wait_ready(running, None, [], t0)
                self.setup(say)
                return False
        self.pidfile().unlink(missing_ok=True)
        self._refuse_held_ports()
        self.prepare(say)
        marks = [LogMark.at_end(p) for p in self.logs()]
        proc = spawn(self.command(), pidfile=self.pidfile(), log=self.stdout_log, cwd=self.conf_dir,
                     env=self.env())
        running = read_pidfile(self.pidfile()) or Running(proc.pid, 0)
        detail = self._wait_ready(running, proc, marks, t0)
        say(f"{self.name}: ready at {self.address()} in {time.monotonic() - t0:.1f} s "
            f"(pid {proc.pid}{', ' + detail if detail else ''})")
        self.setup(say)
        return True

    def _refuse_held_ports(self) -> None:
        """Another process on one of its ports would answer the probes in its place; a port a killed process
        is still letting go of gets `port_grace_s` seconds."""
        deadline = time.monotonic() + self.port_grace_s
        while (conflicts := self.port_conflicts()) and time.monotonic() < deadline:
            time.sleep(0.2)
        if conflicts:
            raise InfraError(conflicts[0][0], [held for _, held in conflicts if held])

    def _wait_ready(self, running: Running, proc: subprocess.Popen | None, marks: list[LogMark],
                    t0: float) -> str:
        deadline = t0 + self.settings.start_timeout
        last = "no answer yet"
        pause = 0.2
        while True:
            code = proc.poll() if proc is not None else None
            if code is not None or not running.alive():
                exit_text = f"exit code {code}" if code is not None else "process gone"
                self.pidfile().unlink(missing_ok=True)
                raise InfraError(f"{self.name}: exited during start-up ({exit_text})", self._why(marks))
            try:
                return self.probe(min(5.0, max(1.0, deadline - time.monotonic())))
            except ProbeFailed as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                # A half-started server would hold its ports and confuse the next attempt.
                stop_group(running.pid, 10, self.name)
                self.pidfile().unlink(missing_ok=True)
                raise InfraError(
                    f"{self.name}: did not answer within {self.settings.start_timeout} s ({last}); stopped it",
                    self._why(marks),
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)

    def _why(self, marks: list[LogMark]) -> list[str]:
        texts = [(m.path, m.new_text()) for m in marks]
        lines = gist("\n".join(t for _, t in texts), ignore=self.harmless)
        # Point at every log this start wrote to: a JVM that dies early only writes to stdout.log.
        wrote = [p for p, t in texts if gist(t)] or [self.main_log()]
        return [*lines, *(f"log: {p}" for p in wrote)]

    def stop(self, say: Say) -> None:
        running = self.running()
        if running is None:
            self.pidfile().unlink(missing_ok=True)
            return
        t0 = time.monotonic()
        how = stop_group(running.pid, self.settings.stop_timeout, self.name)
        self.pidfile().unlink(missing_ok=True)
        say(f"{self.name}: {how} (pid {running.pid}) in {time.monotonic() - t0:.1f} s")

    def health(self, timeout: float = 3.0) -> dict[str, object]:
        """One status entry: state is running (answers), unhealthy (process but no answer) or stopped."""
        running = self.running()
        entry: dict[str, object] = {
            "name": self.name, "address": self.address(), "pid": running.pid if running else None,
            "log": str(self.main_log()), "healthy": False,
        }
        try:
            entry["detail"] = self.probe(timeout)
            entry["healthy"] = True
            entry["state"] = "running" if running else "running (not started by spotreel infra)"
        except ProbeFailed as exc:
            entry["detail"] = str(exc)
            entry["state"] = "unhealthy" if running else "stopped"
        return entry


class SinglePortServer(Server):
    """A server that answers HTTP on one port of the loopback host and writes its log to stdout."""

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        super().__init__(settings)
        self.port = port if port is not None else self.default_port()

    def default_port(self) -> int:
        """The port from the settings, for the instance of the shared stack."""
        raise NotImplementedError

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    def ports(self) -> list[int]:
        return [self.port]

    def main_log(self) -> Path:
        return self.stdout_log


def environment_binary(name: str) -> str | None:
    """A command a Python package installs: beside this interpreter (a venv not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)
