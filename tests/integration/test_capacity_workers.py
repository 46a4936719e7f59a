"""`spotreel capacity` out of the box (no --pool, no --worker-argv) with real `spotreel worker` processes
against a private control plane: jobs submitted through the public API with the gateway's defaults land in
the pool the manager manages; it grows from its warm buffer to the ceiling, a preemption notice for a busy
worker drains it (emergency checkpoint, release, resumed elsewhere to the bit-identical video), every job
succeeds once, and after the cooldown it drains the idle workers back to the buffer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from spotreel.domain import events as ev
from spotreel.devstack.services import settings_env
from spotreel.model_registry import DEFAULT_POOL
from tests.integration.capacitykit import held_at, leases, private_plane, wait_until
from tests.integration.prockit import json_lines, terminate_group
from tests.integration.schedkit import ROOT, Bus
from tests.integration.workerkit import reference_checksum

# serial: on two xdist workers its four real workers and the capacity manager take it past 60 s.
pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(420)]

JOBS = 4
# Small enough for 2 cores, long enough (30 steps) that a notice lands mid-render.
BODY = {"resolution": "32x32", "duration": 0.5, "fps": 8, "num_steps": 30}
STRIKE_STEP = 4


@pytest.fixture
def plane(settings, stack):
    yield from private_plane(settings, buckets=True)


class CapacityProc:
    """`spotreel capacity` as an operator runs it, its JSON lines kept."""

    def __init__(self, env: dict[str, str], home: Path, args: list[str]) -> None:
        self.out = home / "capacity.out"
        self.err = home / "capacity.err"
        self.home = home
        self._files = open(self.out, "ab"), open(self.err, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "spotreel.cli", "capacity", *args], cwd=ROOT, env=env,
                                     stdout=self._files[0], stderr=self._files[1], start_new_session=True)

    def lines(self) -> list[dict]:
        return json_lines(self.out)

    def actions(self, kind: str) -> list[dict]:
        return [line for line in self.lines() if line.get("action") == kind]

    def worker_log(self, wid: str) -> list[dict]:
        return json_lines(self.home / "logs" / "workers" / f"{wid}.log")

    def logs(self) -> str:
        text = f"--- capacity stdout\n{self.out.read_text(errors='replace')[-4000:]}\n--- capacity stderr\n" \
               f"{self.err.read_text(errors='replace')[-4000:]}"
        for log in sorted((self.home / "logs" / "workers").glob("*.log")):
            text += f"\n--- {log.name}\n{log.read_text(errors='replace')[-1500:]}"
        return text

    def stop(self) -> int:
        code = terminate_group(self.proc, 90)
        for f in self._files:
            f.close()
        return code


def post_video(url: str, key: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/v1/videos", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                          "Idempotency-Key": uuid.uuid4().hex})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 202
        return json.loads(r.read())


def test_capacity_runs_real_workers_for_the_default_pool(plane, tiny_model_dir, tmp_path):
    t0 = time.time()
    s = plane.settings
    home = tmp_path / "cap-home"
    home.mkdir()
    env = {**os.environ, **settings_env(s), "SPOTREEL_HOME": str(home), "SPOTREEL_WORKER_KEY": plane.worker_key,
           "SPOTREEL_WORKER_MODEL_DIR": str(tiny_model_dir), "PYTHONUNBUFFERED": "1"}
    notices = home / "run" / "capacity" / DEFAULT_POOL.replace("@", "_") / "notices"
    bus = Bus(s)
    cap = CapacityProc(env, home, ["--floor", "0", "--ceiling", "3", "--idle-buffer", "1", "--up-cooldown", "1",
                                   "--down-cooldown", "10", "--cold-start", "120", "--interval", "0.5"])
    prompts: dict[str, dict] = {}
    background = ThreadPoolExecutor(1)
    try:
        [start] = wait_until(lambda: cap.actions("start"), 60, what="the start line")
        assert start["pool"] == DEFAULT_POOL
        warm = wait_until(lambda: cap.actions("add"), 60, what="the warm idle worker")[0]
        assert len(warm["workers"]) == 1 and warm["want"] == 1, warm

        submitted = time.time()
        for i in range(JOBS):
            body = {"prompt": f"a lighthouse at dusk, take {i}", "seed": 1000 + i, **BODY}
            prompts[post_video(plane.url, plane.tenant_keys["acme"], body)["job_id"]] = body
        up = wait_until(lambda: [a for a in cap.actions("add") if a["at"] >= submitted], 30,
                        what="a scale-up after the burst")[0]
        assert up["want"] == 3 and len(up["workers"]) == 2, up  # 4 queued + buffer, capped at the ceiling

        # A notice for a worker mid-render: the manager drains it; its job resumes on another worker.
        def busy_mid_job():
            bus.poll(0.2)
            for le in (e for e in bus.events if isinstance(e, ev.JobLeased)):
                done = any(isinstance(e, ev.JobSucceeded) and e.job_id == le.job_id for e in bus.events)
                steps = [l["step"] for l in cap.worker_log(le.worker_id)
                         if l.get("event") == "step" and l.get("job_id") == le.job_id]
                if not done and steps and max(steps) >= STRIKE_STEP:
                    return le
            return None

        victim = wait_until(busy_mid_job, 120, what="a worker mid-render")
        noticed_at = time.time()
        (notices / victim.worker_id).write_text("spot instance interruption in 120 s")
        # The uninterrupted render the resumed video must equal, computed here while the fleet works.
        body = prompts[victim.job_id]
        command = SimpleNamespace(prompt=body["prompt"], seed=body["seed"], num_steps=body["num_steps"],
                                  resolution=body["resolution"], duration_s=body["duration"], fps=body["fps"])
        reference = background.submit(reference_checksum, tiny_model_dir, command, "ddim")
        wait_until(lambda: cap.actions("preemption_notice"), 20, what="the manager to take the notice")
        released = bus.wait_event(victim.job_id, ev.LeaseReleased, timeout=60)

        def succeeded() -> set[str]:
            bus.poll(0.2)
            return {e.job_id for e in bus.events if isinstance(e, ev.JobSucceeded)}

        wait_until(lambda: succeeded() == set(prompts), 240, 0.5, f"{JOBS} jobs to succeed")
        all_done = time.time()
        # Back to the warm buffer: idle workers drained after the cooldown, one left.
        wait_until(lambda: sum(len(a["workers"]) for a in cap.actions("add"))
                   - sum(len(a["workers"]) for a in cap.actions("drain")) - len(cap.actions("preemption_notice")) == 1,
                   60, 0.5, "the fleet to shrink to its buffer")
        shrunk = time.time()
        bus.poll(1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cap.logs()}") from None
    finally:
        stopping = time.time()
        code = cap.stop()
        stopped = time.time()
        bus.close()
        background.shutdown(wait=True)
    assert code == 0, cap.logs()
    [stop] = cap.actions("stop")
    events_now = bus.events
    adds, drains = cap.actions("add"), cap.actions("drain")
    registered = {w: next((l["at"] for l in cap.worker_log(w) if l.get("event") == "registered"), None)
                  for a in adds for w in a["workers"]}
    cold = sorted(round(registered[w] - a["at"], 1) for a in adds for w in a["workers"] if registered[w])
    timeline = {k: round(v - t0, 1) for k, v in (("start", start["at"]), ("warm_add", warm["at"]),
                                                  ("submitted", submitted), ("scale_up", up["at"]),
                                                  ("notice", noticed_at), ("released", released.at_ms / 1000),
                                                  ("all_done", all_done), ("shrunk", shrunk),
                                                  ("stopping", stopping), ("stopped", stopped))}
    timeline["worker_cold_starts_s"] = cold
    print(f"scale-up reaction {up['at'] - submitted:.1f} s; notice to release "
          f"{released.at_ms / 1000 - noticed_at:.1f} s; {JOBS} jobs in {all_done - submitted:.1f} s; shrunk "
          f"{shrunk - all_done:.1f} s after the last; adds {[len(a['workers']) for a in adds]}, scale-down drains "
          f"{[(len(a['workers']), a['want']) for a in drains]} (workers, want); resumed at step "
          f"{[e.resume_step for e in events_now if isinstance(e, ev.JobLeased) and e.job_id == victim.job_id]} "
          f"of {BODY['num_steps']}; stop {stop}; timeline {timeline}")

    events = bus.events
    # Jobs with the gateway's defaults run in the manager's default pool, and each succeeds exactly once.
    assert {e.pool for e in events if isinstance(e, ev.JobLeased)} == {DEFAULT_POOL}
    done = Counter(e.job_id for e in events if isinstance(e, ev.JobSucceeded))
    assert set(done) == set(prompts) and set(done.values()) == {1}
    assert not [e for e in events if isinstance(e, (ev.JobFailed, ev.AttemptFailed, ev.LeaseExpired))]

    # Never more than the ceiling at once: live (not draining) workers after each action.
    live = 0
    for line in cap.lines():
        live += len(line.get("workers", [])) if line.get("action") == "add" else 0
        live -= len(line.get("workers", [])) if line.get("action") == "drain" else 0
        live -= 1 if line.get("action") == "preemption_notice" else 0
        assert live <= 3, line

    # The notice: checkpoint at the step it stopped, release (not expiry), resumed there by another worker.
    assert released.reason == "preempted" and released.worker_id == victim.worker_id
    later = [e for e in events if isinstance(e, ev.JobLeased) and e.job_id == victim.job_id and e.epoch > victim.epoch]
    ckpts = [c for c in events if isinstance(c, ev.CheckpointRecorded) and c.job_id == victim.job_id
             and c.epoch == victim.epoch]
    assert later and later[0].worker_id != victim.worker_id
    assert ckpts and later[0].resume_step == ckpts[-1].step >= STRIKE_STEP
    outcome = [l for l in cap.worker_log(victim.worker_id) if l.get("event") == "job"]
    assert [o["outcome"] for o in outcome] == ["preempted"], outcome
    final = next(e for e in events if isinstance(e, ev.JobSucceeded) and e.job_id == victim.job_id)
    from spotreel.platform.s3 import s3_client

    head = s3_client(s, timeout=30.0).head_object(Bucket=s.s3_bucket_artifacts, Key=final.artifact_key)
    assert head["Metadata"]["frames-sha256"] == reference.result(timeout=300)

    # Scale-down drained idle workers only, and every worker exited cleanly (drains and the final stop).
    holds = leases(events)
    scaled_down = [(w, a["at"]) for a in drains for w in a["workers"]]
    assert scaled_down, "the fleet shrank by draining"
    busy_drained = {w: held_at(holds, w, int(at * 1000)) for w, at in scaled_down}
    assert not any(busy_drained.values()), (busy_drained, scaled_down)
    for wid, _ in scaled_down:
        assert not [l for l in cap.worker_log(wid) if l.get("event") == "job" and l["outcome"] != "succeeded"]
    assert stop["stopped_at_exit"] == 1 and stop["preemption_notices"] == 1
    assert stop["provider"]["exit_codes"] == {"0": stop["provider"]["workers_made"]}, stop
