"""`spotreel infra provision` prepares servers it did not start (the Docker Compose path) idempotently."""

from __future__ import annotations

import subprocess
import sys


def test_provision_is_idempotent_on_running_servers(stack):
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "spotreel.cli", "infra", "provision", "--timeout", "30"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("kafka: answering") for line in lines)
    assert any("schema up to date" in line for line in lines)
    assert any(line.startswith("s3: buckets") for line in lines)
