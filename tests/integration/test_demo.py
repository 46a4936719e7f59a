"""`spotreel demo` as a real process against the running local stack (the one `spotreel infra up` gives
the tests): a real worker renders the video, the MP4 lands where --out says, decodes to the frames asked
for and matches the sha256 the API reports. The failure paths end with one line naming what to read, and
leave no worker behind."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotreel.platform.ports import free_port
from spotreel.client.http import Client
from spotreel.media.video import decode_frames

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(180)]

FRAMES, STEPS, RESOLUTION = 4, 8, "32x32"


def demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 150):
    return subprocess.run([sys.executable, "-m", "spotreel.cli", "demo", "--worker-log",
                           str(tmp_path / "demo-worker.log"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def worker_pid(stdout: str) -> int:
    return int(re.search(r"demo: worker pid (\d+) starting", stdout)[1])


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_demo_makes_a_verified_video(stack, settings, tmp_path):
    out = tmp_path / "videos" / "fox.mp4"
    proc = demo(tmp_path, "--frames", str(FRAMES), "--steps", str(STEPS), "--resolution", RESOLUTION,
                "--seed", "7", "--out", str(out), "--timeout", "120")
    log = (tmp_path / "demo-worker.log").read_text(errors="replace")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n--- worker log\n{log[-4000:]}"
    print(proc.stdout)

    job_id = re.search(r"^  job +(j[0-9a-f]{32})", proc.stdout, re.M)[1]
    video = Client(settings.gateway_url, settings.dev_api_key).get(job_id)
    assert video["status"] == "succeeded" and video["params"]["seed"] == 7
    data = out.read_bytes()
    assert hashlib.sha256(data).hexdigest() == video["result"]["sha256"] and len(data) == video["result"]["size_bytes"]
    assert decode_frames(data).shape == (FRAMES, 32, 32, 3)
    assert not list(out.parent.glob("*.part"))

    # The summary tells the states, where the time went and what to run next; the worker is gone.
    assert re.search(r"states +.*succeeded", proc.stdout) and "queue wait" in proc.stdout
    assert f"{FRAMES} frames, 32x32" in proc.stdout and f"spotreel status {job_id}" in proc.stdout
    assert '"event": "exit"' in log
    assert_gone(worker_pid(proc.stdout))


def test_an_unhealthy_stack_is_one_line_naming_the_component_and_its_log(stack, tmp_path):
    # Nothing answers on these ports: the services' health probes (gateway port + 1, 2, 3) fail too.
    env = dict(os.environ, SPOTREEL_GATEWAY_PORT=str(free_port()))
    proc = demo(tmp_path, env=env, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("spotreel demo: the stack is not healthy: ") and "log: " in line
    assert "spotreel infra up" in line
    assert not (tmp_path / "demo-worker.log").exists()


def test_a_timeout_names_the_worker_log_and_stops_the_worker(stack, tmp_path):
    proc = demo(tmp_path, "--timeout", "0.5", "--out", str(tmp_path / "never.mp4"), timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "timed out after" in line and str(tmp_path / "demo-worker.log") in line
    assert not (tmp_path / "never.mp4").exists()
    assert_gone(worker_pid(proc.stdout))
