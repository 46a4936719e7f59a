"""What the tests that run spotreel commands as processes share: reading a process's JSON lines, and ending
its process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The lines of `path` that are JSON objects, in order (a log's other lines, a line cut short by a write
    still under way, a file not written yet: none)."""
    out = []
    for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
        if raw.startswith("{"):
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


def terminate_group(proc: subprocess.Popen, grace_s: float, kill_wait_s: float = 30.0) -> int:
    """SIGTERM to the process group of `proc` (started with start_new_session), SIGKILL when it has not exited
    within `grace_s`; its exit code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(kill_wait_s)
    return proc.returncode
