"""The operator view (monitoring/consoles/spotreel.html) rendered by a real browser: Debian's headless
Chromium screenshots the page the local Prometheus serves while it scrapes a scheduler's and a worker's
registries with data in them. The picture must be the page's size and not blank, and the same page's HTML
must show the scraped values. No chromium or prometheus binary here fails the test (tools/system-packages installs both)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image
from prometheus_client import start_http_server

from spotreel.devstack.monitoring import Prometheus
from spotreel.platform.ports import free_port
from spotreel.services.scheduler.metrics import Metrics
from spotreel.config.settings import Settings
from spotreel.worker.metrics import WorkerMetrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WIDTH, HEIGHT = 1100, 1800


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium not found: apt-get install -y chromium (make test runs tools/system-packages)"
    return path


def test_headless_chromium_renders_the_operator_view(settings: Settings, tmp_path: Path) -> None:
    mine = dataclasses.replace(settings, home=tmp_path / "home")
    host = mine.host
    prom = Prometheus(mine, port=free_port(host), scrape_interval="1s")
    sched, worker = Metrics(), WorkerMetrics()
    sched.queue_depth.labels("tiny-t2v@any", "0").set(4)
    sched.preemptions.labels("tiny-t2v@any", "released").inc(3)
    worker.checkpoint_bytes.labels("tiny-t2v@any").observe(38_000)
    served = [start_http_server(free_port(host), addr=host, registry=r) for r in (sched.registry, worker.registry)]
    lines: list[str] = []
    try:
        prom.preflight()
        for (server, _), name in zip(served, ("scheduler", "worker")):
            prom.write_targets(name, [f"{host}:{server.server_port}"], {"service": name})
        prom.ensure_up(lines.append)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(prom.query('spotreel_scheduler_queue_depth')) < 1:
            time.sleep(0.5)
        with urllib.request.urlopen(prom.console_url(), timeout=10) as resp:
            html = resp.read().decode()
        assert "tiny-t2v@any" in html and ">4<" in html, html[:3000]  # the queued jobs table
        shot = tmp_path / "operator-view.png"
        done = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--disable-dev-shm-usage", f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}",
             prom.console_url()],
            capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0 and shot.exists(), done.stdout + done.stderr
        with Image.open(shot) as img:
            assert img.size == (WIDTH, HEIGHT)
            colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
        # A blank or error page has a handful of colours; text, table borders and header shading many more.
        assert colours is None or len(colours) > 20, len(colours or [])
    finally:
        prom.stop(lines.append)
        for server, thread in served:
            server.shutdown()
            thread.join(5)
