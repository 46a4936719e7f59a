"""Detached server processes tracked by pid files, stopped as whole process groups.

A pid file records the pid and the kernel's start time of that process, so a recycled pid never makes
us report (or kill) a stranger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from spotreel.platform.errors import InfraError


@dataclass(frozen=True)
class ProcStat:
    state: str
    pgrp: int
    session: int
    start_ticks: int


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    return ProcStat(state=fields[0], pgrp=int(fields[2]), session=int(fields[3]), start_ticks=int(fields[19]))


def _alive(st: ProcStat | None) -> bool:
    # A zombie has exited; it only waits for its parent to reap it.
    return st is not None and st.state not in ("Z", "X")


@dataclass(frozen=True)
class Running:
    pid: int
    start_ticks: int

    def alive(self) -> bool:
        st = proc_stat(self.pid)
        return _alive(st) and st.start_ticks == self.start_ticks  # type: ignore[union-attr]


def read_pidfile(path: Path) -> Running | None:
    """The live process this pid file names, or None (no file, unreadable, or that process is gone)."""
    try:
        data = json.loads(path.read_text())
        running = Running(int(data["pid"]), int(data["start_ticks"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return running if running.alive() else None


def recorded_pid(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def spawn(
    argv: Sequence[str],
    *,
    pidfile: Path,
    log: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """Start a server in its own session so it outlives the CLI and its whole group can be signalled."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n=== spotreel infra: starting at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ===\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=cwd, env=dict(env) if env is not None else None,
                start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            raise InfraError(f"cannot start {argv[0]}: {exc.strerror}") from None
    st = proc_stat(proc.pid)
    tmp = pidfile.with_name(pidfile.name + ".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "start_ticks": st.start_ticks if st else 0,
                               "argv0": argv[0]}) + "\n")
    tmp.replace(pidfile)
    return proc


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group we created (same session id too, so never a stranger)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = proc_stat(int(entry.name))
        if _alive(st) and st.pgrp == pgid and st.session == pgid:  # type: ignore[union-attr]
            members.append(int(entry.name))
    return members


def _reap(pid: int) -> None:
    # Only works when we are the parent (tests starting servers in-process); harmless otherwise.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(pgid: int, timeout: float, name: str) -> str:
    """SIGTERM the group, SIGKILL whatever is left after `timeout`; 'stopped' or 'killed'."""
    if not group_members(pgid):
        return "stopped"
    _signal_group(pgid, signal.SIGTERM)
    if _wait_gone(pgid, timeout):
        return "stopped"
    _signal_group(pgid, signal.SIGKILL)
    if _wait_gone(pgid, 15):
        return "killed"
    raise InfraError(f"{name}: process group {pgid} survived SIGKILL", [f"pids: {group_members(pgid)}"])


def _wait_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        _reap(pgid)
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
