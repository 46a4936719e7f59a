"""A prompt in, an MP4 out, through the public HTTP API of the running stack (`spotreel infra up`: gateway,
scheduler, projector), rendered by a real `spotreel worker` process on the tiny model.

- one video: 202 with a job id, progress visible on the SSE stream (running, percent rising strictly
  between 0 and 100), status succeeded, the MP4 downloads with the advertised sha256 and decodes to the
  asked frames;
- a two-node DAG: the child waits, runs only after its parent succeeded, and both end succeeded;
- a delayed video cancelled with POST .../cancel ends cancelled and is never leased.

The worker serves a pool of its own (the registry's tiny-t2v on a GPU type unique to the run: the stack's
gateway checks the model against its registry), so it takes only these jobs and no other worker on the
shared stack takes them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from spotreel.platform.seed import DEV_WORKER_KEY
from spotreel.client.http import Client
from spotreel.config.settings import Settings
from spotreel.media.video import decode_frames
from tests.chaos.wholekit import api, download, sha256, wait_until
from tests.integration.workerkit import WorkerProc, tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SHAPE = {"resolution": "32x24", "duration": 0.5, "fps": 8, "num_steps": 24}
WATCHED_STEPS = 100
TERMINAL = {"succeeded", "failed", "cancelled", "dead_lettered"}


@dataclass
class Stack:
    """What workerkit.WorkerProc needs: the shared stack's gateway, the dev worker key, the tiny model."""

    settings: Settings
    tmp: Path
    model_dir: Path
    worker_key: str = DEV_WORKER_KEY

    @property
    def gateway_url(self) -> str:
        return self.settings.gateway_url

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONUNBUFFERED="1")


def _status(url: str, key: str, job_id: str) -> dict:
    status, body, _ = api(url, key, "GET", f"/v1/videos/{job_id}")
    assert status == 200, (status, body)
    return body


def _history(url: str, key: str, job_id: str) -> list[dict]:
    status, body, _ = api(url, key, "GET", f"/v1/videos/{job_id}/events")
    assert status == 200, (status, body)
    return body["events"]


def test_prompt_to_mp4_through_the_public_api(stack, settings, tmp_path):
    url, key = settings.gateway_url, settings.dev_api_key
    model, gpu = "tiny-t2v", f"e2e-{uuid.uuid4().hex[:8]}"
    run = uuid.uuid4().hex[:8]
    began = time.monotonic()
    worker = WorkerProc(Stack(settings, tmp_path, tiny_model(settings)), "e2e", model, "http",
                        ("--max-jobs", "3", "--progress-seconds", "0.5"), gpu=gpu)
    try:
        # -- one video, watched on its SSE stream -----------------------------------------------------
        # Long enough (about 4 s here) that the stream, which polls the read model every second, sees the
        # first progress report: the scheduler persists one report per lease and then one per interval.
        body = {"prompt": "a red fox running in snow", "model": model, "gpu_type": gpu, "seed": 4242,
                **SHAPE, "num_steps": WATCHED_STEPS}
        status, accepted, _ = api(url, key, "POST", "/v1/videos", body, {"Idempotency-Key": f"e2e-{run}-one"})
        assert status == 202 and accepted["status"] == "accepted", (status, accepted)
        job = accepted["job_id"]
        snapshots: list[tuple[str, dict]] = []
        watcher = threading.Thread(target=lambda: snapshots.extend(Client(url, key).stream(job, timeout=60)),
                                   daemon=True)
        watcher.start()

        # -- a DAG (parent, child) and a delayed video that is cancelled ------------------------------------
        dag = {"nodes": [{"key": "intro", "prompt": "a small boat on a calm lake", "model": model, "gpu_type": gpu,
                          "seed": 7, **SHAPE},
                         {"key": "final", "prompt": "a city street at night", "model": model, "gpu_type": gpu,
                          "seed": 8, "parents": ["intro"], **SHAPE}]}
        status, dag_answer, _ = api(url, key, "POST", "/v1/dags", dag, {"Idempotency-Key": f"e2e-{run}-dag"})
        assert status == 202, dag_answer
        node = {v["key"]: v["job_id"] for v in dag_answer["videos"]}
        status, later, _ = api(url, key, "POST", "/v1/videos",
                               {"prompt": "a sunrise", "model": model, "gpu_type": gpu, "delay_seconds": 3600, **SHAPE},
                               {"Idempotency-Key": f"e2e-{run}-later"})
        assert status == 202, later
        wait_until(lambda: _status(url, key, later["job_id"])["status"] == "scheduled", 60, "the delayed video")
        status, cancel, _ = api(url, key, "POST", f"/v1/videos/{later['job_id']}/cancel")
        assert status == 202 and cancel["requested"] == "cancel", cancel

        watcher.join(120)
        assert not watcher.is_alive(), "the SSE stream did not end"
        done = _status(url, key, job)
        assert done["status"] == "succeeded", done
        statuses = [data for event, data in snapshots if event == "status"]
        assert statuses and statuses[-1]["status"] == "succeeded" and snapshots[-1][0] == "end", snapshots
        reported = [e for e in _history(url, key, job) if e["type"] == "ProgressReported"]
        assert reported, _history(url, key, job)
        running = [s["progress"]["percent"] for s in statuses if s["status"] == "running"]
        assert any(0 < p < 100 for p in running), statuses
        assert running == sorted(running), running  # no preemption here: progress only rises

        mp4 = download(url, key, job)
        assert sha256(mp4) == done["result"]["sha256"] and len(mp4) == done["result"]["size_bytes"]
        frames = decode_frames(mp4)
        assert frames.shape == (int(SHAPE["duration"] * SHAPE["fps"]), 24, 32, 3), frames.shape

        # -- the DAG ran in order, the cancelled video never ran ----------------------------------------
        wait_until(lambda: all(_status(url, key, j)["status"] in TERMINAL for j in node.values()), 180,
                   "both DAG nodes to end", every=0.5, on_timeout=worker.logs)
        assert [_status(url, key, node[k])["status"] for k in ("intro", "final")] == ["succeeded", "succeeded"]
        parent, child = _history(url, key, node["intro"]), _history(url, key, node["final"])
        parent_done = next(e["occurred_at"] for e in parent if e["type"] == "JobSucceeded")
        child_types = [e["type"] for e in child]
        assert child_types.index("JobWaiting") < child_types.index("JobLeased"), child_types
        assert next(e["occurred_at"] for e in child if e["type"] == "JobLeased") >= parent_done
        wait_until(lambda: _status(url, key, later["job_id"])["status"] == "cancelled", 60, "the cancel")
        assert "JobLeased" not in [e["type"] for e in _history(url, key, later["job_id"])]

        assert worker.wait_exit(60) == 0, worker.logs()
        assert [o["outcome"] for o in worker.outcomes()] == ["succeeded"] * 3
    finally:
        worker.stop()
    print(f"e2e: three videos rendered and one cancelled in {time.monotonic() - began:.0f} s")
