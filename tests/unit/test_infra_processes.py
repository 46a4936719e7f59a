"""Pid files and process groups: we stop what we started, all of it, and never a stranger."""

from __future__ import annotations

import json
import sys
import time

import pytest

from spotreel.platform.processes import group_members, read_pidfile, recorded_pid, spawn, stop_group

pytestmark = pytest.mark.unit

# A parent that starts a child in its own process group, then both sleep.
FAMILY = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
)
STUBBORN = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_spawned_group_is_tracked_and_stopped_whole(tmp_path):
    pidfile = tmp_path / "fam.pid"
    proc = spawn([sys.executable, "-c", FAMILY], pidfile=pidfile, log=tmp_path / "fam.log", cwd=tmp_path)
    try:
        running = read_pidfile(pidfile)
        assert running is not None and running.pid == proc.pid
        assert wait_for(lambda: len(group_members(proc.pid)) == 2), "child did not start"
        assert stop_group(proc.pid, 5, "fam") == "stopped"
        assert group_members(proc.pid) == []
        assert read_pidfile(pidfile) is None  # the pid file now names a dead process
    finally:
        stop_group(proc.pid, 1, "fam")


def test_sigterm_ignored_means_sigkill_after_timeout(tmp_path):
    log = tmp_path / "stubborn.log"
    proc = spawn([sys.executable, "-c", STUBBORN], pidfile=tmp_path / "s.pid", log=log, cwd=tmp_path)
    assert wait_for(lambda: "ready" in log.read_text())
    t0 = time.monotonic()
    assert stop_group(proc.pid, 0.5, "stubborn") == "killed"
    elapsed = time.monotonic() - t0
    assert 0.5 <= elapsed < 10  # it waited out the grace period, then did not hang
    assert group_members(proc.pid) == []
    # stop_group reaps its own children, so Popen may only see ECHILD (returncode 0); when it
    # wins the race it must see the SIGKILL.
    assert proc.wait(5) in (-9, 0)
    assert "ready" in log.read_text()


def test_a_recycled_pid_is_not_ours(tmp_path):
    proc = spawn([sys.executable, "-c", "import time; time.sleep(600)"], pidfile=tmp_path / "p.pid",
                 log=tmp_path / "p.log", cwd=tmp_path)
    try:
        data = json.loads((tmp_path / "p.pid").read_text())
        data["start_ticks"] += 1  # same pid, different process start: what pid reuse looks like
        (tmp_path / "p.pid").write_text(json.dumps(data))
        assert read_pidfile(tmp_path / "p.pid") is None
        assert recorded_pid(tmp_path / "p.pid") == proc.pid
    finally:
        stop_group(proc.pid, 2, "p")


def test_garbage_pidfile(tmp_path):
    (tmp_path / "x.pid").write_text("not json")
    assert read_pidfile(tmp_path / "x.pid") is None
    assert read_pidfile(tmp_path / "missing.pid") is None


def test_output_goes_to_the_log_file(tmp_path):
    log = tmp_path / "out.log"
    proc = spawn([sys.executable, "-c", "import sys; print('hello'); print('oops', file=sys.stderr)"],
                 pidfile=tmp_path / "o.pid", log=log, cwd=tmp_path)
    proc.wait(10)
    text = log.read_text()
    assert "hello" in text and "oops" in text and "=== spotreel infra: starting" in text
