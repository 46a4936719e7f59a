"""`spotreel simulate` stopped with SIGTERM (a `kill`, a CI timeout, a closed terminal) stops its private
services and drops its keyspace, as a run that ends does, instead of dying at once and leaving its services
running on their ports for good."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie not reaped yet is gone for this purpose
        return " Z " not in open(f"/proc/{pid}/stat").read().rpartition(")")[2][:4]
    except OSError:
        return False


def test_a_simulation_stopped_by_sigterm_stops_its_services_and_drops_its_keyspace(stack, cassandra_cluster):
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotreel.cli", "simulate", "--workers", "4", "--stage-seconds", "120",
         "--drain-seconds", "5", "--rate", "1", "--steps", "3", "--step-seconds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    lines: list[str] = []
    pids: dict[str, int] = {}
    run_id = ""
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if m := re.match(r"simulation (\w+):", line):
                run_id = m.group(1)
            if m := re.match(r"(\w+): ready at .*\(pid (\d+)", line):
                pids[m.group(1)] = int(m.group(2))
            if "webhooks" in pids:
                break
        assert run_id and {"scheduler", "projector", "gateway", "webhooks"} <= set(pids), lines
        assert all(_alive(pid) for pid in pids.values()), (pids, lines)
        time.sleep(3)  # the fleet is running
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
        lines += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, lines[-20:]
    gone_by = time.monotonic() + 10
    while any(_alive(pid) for pid in pids.values()) and time.monotonic() < gone_by:
        time.sleep(0.2)
    assert not [name for name, pid in pids.items() if _alive(pid)], lines[-20:]
    session = cassandra_cluster.connect()
    try:
        keyspaces = {r.keyspace_name for r in session.execute("SELECT keyspace_name FROM system_schema.keyspaces")}
    finally:
        session.shutdown()
    assert f"sim_{run_id}" not in keyspaces, lines[-20:]
