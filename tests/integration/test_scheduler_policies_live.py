"""Every dispatch policy the domain has, switched on through the settings catalogue and seen live.

Two private schedulers share the module (one partition each, their own topics): `plain` with the defaults and
`tuned` with graded aging (one tier per second, at most two), a 6 s starvation bound, preemption after 3 s of
running and at most one a minute per pool. The same requests go to both and dispatch differs as the settings
say. The job policy defaults (retry, stuck rule) are the gateway's (SPOTREEL_GATEWAY_DEFAULT_*): here the
Kafka job client, which builds SubmitJobs with the gateway's own code and configuration, submits with them.
Each test uses a model of its own (a pool of its own). Fair-share preemption (SPOTREEL_PREEMPT_FAIR_SHARE_RATIO)
is shown live in test_scheduler_fair_share_preemption.py, resume affinity in test_scheduler_resume_match.py.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest

from spotreel.api.config import from_env as gateway_config
from spotreel.client.kafka import KafkaJobClient
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.config.settings import Settings
from tests.integration.schedkit import GPU, Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TUNED = {"SPOTREEL_DISPATCH_AGING_STEP_S": "1", "SPOTREEL_DISPATCH_AGING_MAX_BOOST": "2",
         "SPOTREEL_DISPATCH_MAX_WAIT_S": "6", "SPOTREEL_PREEMPT_MIN_RUN_S": "3", "SPOTREEL_PREEMPT_PER_MINUTE": "1"}


@dataclass
class Sched:
    settings: Settings
    bus: Bus
    proc: SchedulerProc


@pytest.fixture(scope="module")
def schedulers(stack, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("policies")
    made: dict[str, Sched] = {}
    try:
        for name, env in (("plain", {}), ("tuned", TUNED)):
            s = scheduler_settings("pol" + uuid.uuid4().hex[:10], partitions=1)
            make_topics(s)
            made[name] = Sched(s, Bus(s), SchedulerProc(s, tmp, name=name, env=env))
        for sched in made.values():
            sched.proc.wait_owning({0})
        yield made
    finally:
        for sched in made.values():
            sched.proc.stop()
            sched.bus.close()
            drop_topics(sched.settings)


def queue(bus: Bus, model: str, priority: int) -> c.SubmitJob:
    job = submit("acme", f"{model}-{uuid.uuid4().hex[:6]}", model=model, priority=priority)
    bus.send(job)
    bus.wait_event(job.job_id, ev.JobQueued)
    return job


def leased(bus: Bus, job_id: str) -> ev.JobLeased:
    return bus.wait_event(job_id, ev.JobLeased)


def test_aging_lets_an_old_low_priority_job_overtake_a_new_high_priority_one(schedulers):
    model = f"age-{uuid.uuid4().hex[:6]}"
    jobs = {}
    for name, sched in schedulers.items():
        jobs[name] = [queue(sched.bus, model, 1)]
    time.sleep(2.2)  # two aging steps: tier 1 + 2 = 3 on `tuned`
    for name, sched in schedulers.items():
        jobs[name].append(queue(sched.bus, model, 2))
    got = {name: sched.bus.request_work(f"w-{name}", model=model).job_id for name, sched in schedulers.items()}
    assert got["plain"] == jobs["plain"][1].job_id  # strict tiers: the new priority-2 job
    assert got["tuned"] == jobs["tuned"][0].job_id  # aged to 3, above the new 2
    why = leased(schedulers["tuned"].bus, got["tuned"])
    assert why.why_priority == 3 and not why.why_overdue


def test_the_aging_bound_holds_until_the_starvation_bound_takes_over(schedulers):
    bus, model = schedulers["tuned"].bus, f"bound-{uuid.uuid4().hex[:6]}"
    low = queue(bus, model, 0)
    time.sleep(3.2)  # three steps, but at most two tiers: 0 + 2 < 3
    high = queue(bus, model, 3)
    assert bus.request_work("wb1", model=model).job_id == high.job_id
    time.sleep(max(0.0, 6.2 - (time.time() * 1000 - bus.job_events(low.job_id)[-1].at_ms) / 1000))
    urgent = queue(bus, model, 9)
    # Waited past SPOTREEL_DISPATCH_MAX_WAIT_S (6 s): overdue, ahead of a fresh priority 9.
    assert bus.request_work("wb2", model=model).job_id == low.job_id
    why = leased(bus, low.job_id)
    assert why.why_overdue and why.why_waited_ms >= 6000
    assert bus.request_work("wb3", model=model).job_id == urgent.job_id


def test_preemption_waits_its_minimum_run_and_keeps_to_its_rate(schedulers):
    model = f"pre-{uuid.uuid4().hex[:6]}"
    running: dict[str, list[tuple[str, int]]] = {}
    for name, sched in schedulers.items():
        lows = [queue(sched.bus, model, 1) for _ in range(2)]
        running[name] = []
        for i, _ in enumerate(lows):
            got = sched.bus.request_work(f"{name}-p{i}", model=model)
            running[name].append((got.job_id, got.at_ms))
        for _ in range(2):
            queue(sched.bus, model, 8)

    def asked(name: str) -> list[ev.PreemptRequested]:
        return [e for job_id, _ in running[name] for e in schedulers[name].bus.job_events(job_id)
                if isinstance(e, ev.PreemptRequested)]

    tuned = schedulers["tuned"].bus.wait_for(lambda: asked("tuned"), 20, "a PreemptRequested on tuned")
    granted = dict(running["tuned"])
    assert tuned[0].at_ms - granted[tuned[0].job_id] >= 3000  # SPOTREEL_PREEMPT_MIN_RUN_S
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for sched in schedulers.values():
            sched.bus.poll(0.1)
    # Two priority-8 jobs wait, but SPOTREEL_PREEMPT_PER_MINUTE=1 asks one lease back; the defaults (a 60 s
    # minimum run) ask none yet.
    assert len(asked("tuned")) == 1 and asked("plain") == []


def test_the_gateways_job_defaults_set_retries_and_the_stuck_rule(schedulers):
    sched = schedulers["tuned"]
    model = f"ret-{uuid.uuid4().hex[:6]}"
    body = {"prompt": "a red fox", "model": model, "gpu_type": GPU, "resolution": "32x32", "num_steps": 10}
    cfg = gateway_config({"SPOTREEL_GATEWAY_DEFAULT_MAX_ATTEMPTS": "1", "SPOTREEL_GATEWAY_DEFAULT_STUCK_STEPS": "1",
                          "SPOTREEL_GATEWAY_DEFAULT_STUCK_MIN_SECONDS": "1"})
    with KafkaJobClient(sched.settings) as plain, KafkaJobClient(sched.settings, cfg) as tuned:
        jobs = {name: client.submit("acme", f"{name}-{uuid.uuid4().hex[:6]}", body).job_id
                for name, client in (("plain", plain), ("tuned", tuned))}
    for name, job_id in jobs.items():
        sched.bus.wait_event(job_id, ev.JobQueued)
    # One visible failure each: the built-in five attempts retry it, the operator's one dead-letters it.
    for name, job_id in jobs.items():
        got = sched.bus.request_work(f"rf-{name}", model=model)
        sched.bus.send(c.FailJob(sched.bus.next_id("fail"), got.job_id, got.epoch, got.worker_id, "oom", "boom", True))
    plain_end = sched.bus.wait_event(jobs["plain"], ev.JobScheduled)
    tuned_end = sched.bus.wait_event(jobs["tuned"], ev.JobDeadLettered)
    assert plain_end.reason == "backoff" and tuned_end.reason == "max_attempts"

    stuck_model = f"stk-{uuid.uuid4().hex[:6]}"
    body["model"] = stuck_model
    with KafkaJobClient(sched.settings) as plain, KafkaJobClient(sched.settings, cfg) as tuned:
        stuck = {name: client.submit("acme", f"s{name}-{uuid.uuid4().hex[:6]}", body).job_id
                 for name, client in (("plain", plain), ("tuned", tuned))}
    for name, job_id in stuck.items():
        sched.bus.wait_event(job_id, ev.JobQueued)
        sched.bus.request_work(f"sw-{name}", model=stuck_model)
    # Neither worker reports a step: the operator's 1 s floor calls it stuck, the built-in 120 s does not yet.
    failed = sched.bus.wait_event(stuck["tuned"], ev.AttemptFailed, timeout=20)
    assert failed.error_code == "stuck"
    assert not [e for e in sched.bus.job_events(stuck["plain"]) if isinstance(e, ev.AttemptFailed)]
