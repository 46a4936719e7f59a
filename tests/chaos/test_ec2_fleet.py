"""The whole system on a spot fleet: `spotreel capacity --provider ec2` against moto (EC2 and SSM on
127.0.0.1), each instance played by a real `spotreel worker` booted from its user data with its own AWS
metadata mock (tests/chaos/ec2kit.py), a private control plane, real jobs.

A queue of 3 tiny videos makes the manager launch 2 tagged spot instances. One worker gets EC2's spot
interruption notice from its metadata mock mid-render: it checkpoints and releases inside the window, EC2
(the test) reclaims the instance, the job resumes on the other worker to bit-identical frames, and the
manager launches a replacement. The manager is then killed with SIGKILL and started again: it adopts the
two instances and launches nothing. When the queue is empty the idle instances are drained (SSM
`systemctl stop`: SIGTERM) and terminated, and no instance is left. Every video completes exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from spotreel.devstack.moto import FAKE_CREDENTIALS
from spotreel.devstack.services import settings_env
from spotreel.domain import events as ev
from spotreel.services.capacity.provider_ec2 import TAG_TERMINATED_BY
from tests.chaos.ec2kit import Instances
from tests.integration.capacitykit import held_at, leases, wait_until
from tests.integration.motokit import TEMPLATE, fresh_account, instances, running_moto, tags
from tests.integration.schedkit import Bus
from tests.integration import test_capacity_workers
from tests.integration.test_capacity_workers import BODY, STRIKE_STEP, CapacityProc, post_video
from tests.integration.workerkit import reference_checksum

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

POOL = "tiny-t2v@any"
DEPLOYMENT = "chaos"
JOBS = 3
# The jobs (BODY, STRIKE_STEP) and the private plane of the capacity test with local workers.
plane = test_capacity_workers.plane


@pytest.fixture
def moto(tmp_path):
    yield from running_moto(tmp_path / "moto")


def test_a_spot_fleet_on_ec2_survives_an_interruption_and_a_killed_manager(plane, moto, imds_mock, tiny_model_dir,
                                                                           tmp_path):
    t0 = time.time()
    s = plane.settings
    account = fresh_account(moto)
    account.ssm.put_parameter(Name=f"/spotreel/{DEPLOYMENT}/worker-key", Value=plane.worker_key,
                              Type="SecureString")
    home = tmp_path / "cap-home"
    home.mkdir()
    aws = {"AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
           "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"]}
    env = {**os.environ, **settings_env(s), **aws, "SPOTREEL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    worker_settings = [f"SPOTREEL_S3_ENDPOINT_URL={s.s3_endpoint}",
                       f"SPOTREEL_S3_BUCKET_ARTIFACTS={s.s3_bucket_artifacts}",
                       f"SPOTREEL_S3_BUCKET_CHECKPOINTS={s.s3_bucket_checkpoints}",
                       f"SPOTREEL_WORKER_MODEL_DIR={tiny_model_dir}", "SPOTREEL_WORKER_THREADS=1",
                       "SPOTREEL_WORKER_CHECKPOINT_EVERY=0.3", "SPOTREEL_WORKER_LEASE_WAIT=5",
                       "SPOTREEL_WORKER_NOTICE_POLL=1"]
    args = ["--provider", "ec2", "--pool", POOL, "--floor", "0", "--ceiling", "2", "--idle-buffer", "0",
            "--up-cooldown", "1", "--down-cooldown", "10", "--cold-start", "45", "--interval", "0.5",
            "--gateway-url", plane.url, "--ec2-endpoint", account.endpoint, "--ec2-launch-template", TEMPLATE,
            "--ec2-instance-types", "g6.xlarge,g5.xlarge", "--ec2-subnets", ",".join(account.subnets.values()),
            "--ec2-deployment", DEPLOYMENT, "--ec2-drain-timeout", "60",
            *[a for kv in worker_settings for a in ("--ec2-worker-env", kv)]]
    # What the machine image holds besides the user data: the interpreter and its packages.
    machine_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTREEL_", "AWS_"))}
    machine_env["PYTHONUNBUFFERED"] = "1"
    cloud = Instances(account.ec2, account.ssm, POOL, tmp_path / "machines", imds_mock, machine_env)
    cloud.start()
    bus = Bus(s)
    caps = [CapacityProc(env, home, args)]
    prompts: dict[str, dict] = {}
    background = ThreadPoolExecutor(1)

    def succeeded() -> set[str]:
        bus.poll(0.2)
        return {e.job_id for e in bus.events if isinstance(e, ev.JobSucceeded)}

    try:
        wait_until(lambda: caps[0].actions("start"), 60, what="the start line")
        for i in range(JOBS):
            body = {"prompt": f"a harbour crane at night, take {i}", "seed": 4000 + i, **BODY}
            prompts[post_video(plane.url, plane.tenant_keys["acme"], body)["job_id"]] = body
        first = wait_until(lambda: caps[0].actions("add"), 60, what="the first launch")[0]
        assert len(first["workers"]) == 2, first
        launched = {i["InstanceId"]: i for i in instances(account.ec2)}
        assert set(launched) == set(first["workers"])
        for inst in launched.values():
            t = tags(inst)
            assert (t["spotreel:pool"], t["spotreel:deployment"], inst.get("InstanceLifecycle")) == \
                (POOL, DEPLOYMENT, "spot")

        # The interruption notice lands on a worker mid-render.
        def busy_mid_job():
            bus.poll(0.2)
            for le in (e for e in bus.events if isinstance(e, ev.JobLeased)):
                if le.worker_id not in launched or le.job_id in succeeded():
                    continue
                steps = [line["step"] for line in cloud.machine(le.worker_id).lines()
                         if line.get("event") == "step" and line.get("job_id") == le.job_id]
                if steps and max(steps) >= STRIKE_STEP:
                    return le
            return None

        victim = wait_until(busy_mid_job, 150, what="a worker mid-render")
        body = prompts[victim.job_id]
        command = SimpleNamespace(prompt=body["prompt"], seed=body["seed"], num_steps=body["num_steps"],
                                  resolution=body["resolution"], duration_s=body["duration"], fps=body["fps"])
        reference = background.submit(reference_checksum, tiny_model_dir, command, "ddim")
        noticed_at = time.time()
        cloud.interrupt(victim.worker_id)
        released = bus.wait_event(victim.job_id, ev.LeaseReleased, timeout=60)
        replacement = wait_until(lambda: [a for a in caps[0].actions("add") if a["at"] > noticed_at], 60,
                                 what="a replacement launch")[0]
        assert len(replacement["workers"]) == 1 and replacement["workers"][0] not in launched, replacement

        # kill -9 of the manager mid-run, then a new one: it adopts the fleet and launches nothing.
        os.killpg(caps[0].proc.pid, signal.SIGKILL)
        caps[0].proc.wait(10)
        killed_at = time.time()
        before_restart = {i["InstanceId"] for i in instances(account.ec2)}
        caps.append(CapacityProc(env, home, args))
        wait_until(lambda: len(caps[0].actions("start")) == 2, 60, what="the second manager's start line")

        wait_until(lambda: succeeded() == set(prompts), 240, 0.5, f"{JOBS} jobs to succeed")
        all_done = time.time()
        wait_until(lambda: not instances(account.ec2, "pending", "running"), 90, 0.5, "every instance terminated")
        gone = time.time()
        bus.poll(1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{caps[-1].logs()}\n"
                             + "\n".join(f"--- {m.instance_id}\n{m.log.read_text(errors='replace')[-2000:]}"
                                         for m in cloud.all())) from None
    finally:
        codes = [cap.stop() for cap in caps]
        cloud.stop()
        bus.close()
        background.shutdown(wait=True)
    assert codes[-1] == 0, caps[-1].logs()
    lines = caps[-1].lines()  # both managers append to the same output file
    starts = [i for i, line in enumerate(lines) if line.get("action") == "start"]
    after_restart = lines[starts[1]:]
    [stop] = [line for line in after_restart if line.get("action") == "stop"]
    events = bus.events
    machines = {m.instance_id: m for m in cloud.all()}
    final_states = {i["InstanceId"]: i for i in instances(account.ec2)}
    print(f"launch {first['at'] - t0:.1f} s after start; notice to release {released.at_ms / 1000 - noticed_at:.1f} s;"
          f" replacement launched {replacement['at'] - noticed_at:.1f} s after the notice; restart at "
          f"{killed_at - t0:.1f} s; {JOBS} jobs done {all_done - t0:.1f} s; fleet gone {gone - all_done:.1f} s later; "
          f"boots {sorted(round(m.booted_at - t0, 1) for m in machines.values())}; "
          f"exits {[(m.instance_id, m.exit_code, m.killed) for m in machines.values()]}; provider {stop['provider']}")

    # Every video exactly once; nothing failed or expired.
    done = Counter(e.job_id for e in events if isinstance(e, ev.JobSucceeded))
    assert set(done) == set(prompts) and set(done.values()) == {1}
    assert not [e for e in events if isinstance(e, (ev.JobFailed, ev.AttemptFailed, ev.LeaseExpired))]

    # The interruption: the worker read EC2's notice, checkpointed and released inside the two minutes;
    # the job resumed on another machine from that checkpoint, to the uninterrupted render's frames.
    vm = machines[victim.worker_id]
    assert [line["notice"] for line in vm.lines() if line.get("event") == "cloud_notice"] == ["interruption"]
    assert [o["outcome"] for o in vm.lines() if o.get("event") == "job"] == ["preempted"]
    assert released.reason == "preempted" and released.at_ms / 1000 - noticed_at < 120 and vm.exit_code == 0
    later = [e for e in events if isinstance(e, ev.JobLeased) and e.job_id == victim.job_id and e.epoch > victim.epoch]
    ckpts = [c for c in events if isinstance(c, ev.CheckpointRecorded) and c.job_id == victim.job_id
             and c.epoch == victim.epoch]
    assert later and later[0].worker_id != victim.worker_id
    assert ckpts and later[0].resume_step == ckpts[-1].step >= STRIKE_STEP
    final = next(e for e in events if isinstance(e, ev.JobSucceeded) and e.job_id == victim.job_id)
    from spotreel.platform.s3 import s3_client

    head = s3_client(s, timeout=30.0).head_object(Bucket=s.s3_bucket_artifacts, Key=final.artifact_key)
    assert head["Metadata"]["frames-sha256"] == reference.result(timeout=300)
    assert TAG_TERMINATED_BY not in tags(final_states[victim.worker_id])  # EC2 took it, not the manager

    # Three instances in all: the first two and the replacement; the restarted manager launched none and
    # adopted the two that ran.
    assert set(final_states) == set(first["workers"]) | set(replacement["workers"]) == before_restart
    assert not [line for line in after_restart if line.get("action") == "add"]
    assert stop["provider"]["adopted"] == 2 and stop["provider"]["launched"] == {}, stop

    # Scale-in: the idle instances were drained (SSM stop, SIGTERM) before the manager terminated them,
    # held no lease when drained, and their workers exited by themselves; no instance is left.
    holds = leases(events)
    drained = [(w, line["at"]) for line in lines if line.get("action") == "drain" for w in line["workers"]]
    assert sorted(w for w, _ in drained) == sorted(set(final_states) - {victim.worker_id})
    for wid, at in drained:
        m = machines[wid]
        assert not held_at(holds, wid, int(at * 1000)), wid
        assert m.drain_commands_at and tags(final_states[wid])[TAG_TERMINATED_BY] == "capacity"
        assert m.drain_commands_at[0] <= (m.terminated_seen_at or float("inf"))
        assert m.exit_code == 0 and not m.killed, (wid, m.exit_code)
    assert {i["State"]["Name"] for i in final_states.values()} == {"terminated"}
    assert not cloud.errors, cloud.errors[:3]
