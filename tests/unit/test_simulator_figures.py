"""The fleet simulator's judge: lost and duplicated jobs from real domain events, latencies, GPU accounting,
saturation, and the option parsing."""

from __future__ import annotations

import asyncio
import time

import pytest

from spotreel.domain import events as ev
from spotreel.fleetsim.config import SimConfig, parse_policy, parse_ramp, parse_shares
from spotreel.fleetsim.figures import (Accepted, Attempt, WorkerLife, goodput_by_stage, goodput_hold,
                                                    gpu_accounting, judge_events, kept_step_times, percentile,
                                                    saturated)
from spotreel.fleetsim.fleet import Meter


def queued(job: str, v: int, at: int) -> ev.JobQueued:
    return ev.JobQueued(job, v, at, f"c{v}", "submitted")


def leased(job: str, v: int, at: int, epoch: int = 1) -> ev.JobLeased:
    return ev.JobLeased(job, v, at, f"c{v}", "w1", "m@g", epoch, epoch, 30_000, at + 30_000, None, None, None)


def requeued(job: str, v: int, at: int) -> ev.JobRequeued:
    return ev.JobRequeued(job, v, at, f"c{v}", "lease_expired", False)


def succeeded(job: str, v: int, at: int, epoch: int = 1) -> ev.JobSucceeded:
    return ev.JobSucceeded(job, v, at, f"c{v}", epoch, f"videos/{job}.mp4", "0" * 64, 1)


def expired(job: str, v: int, at: int) -> ev.LeaseExpired:
    return ev.LeaseExpired(job, v, at, f"c{v}", 1, "w1", 1)


ACC = [Accepted("ja", "acme", 0, 1_000), Accepted("jb", "globex", 9, 1_000), Accepted("jc", "acme", 0, 1_000),
       Accepted("jd", "acme", 5, 1_000)]


def test_judge_finds_duplicates_lost_and_never_seen_jobs():
    events = [
        queued("ja", 2, 1_010), leased("ja", 3, 1_050), succeeded("ja", 4, 2_000),
        # jb completed twice: a duplicate even though each event alone looks fine
        queued("jb", 2, 1_020), leased("jb", 3, 1_030), succeeded("jb", 4, 1_500),
        succeeded("jb", 5, 1_600, epoch=2),
        # jc leased, lease expired, requeued, then nothing more: not terminal -> lost
        queued("jc", 2, 1_005), leased("jc", 3, 1_100), expired("jc", 4, 5_000), requeued("jc", 5, 5_000),
        # an event of a job nobody accepted in this run is ignored
        succeeded("zz", 2, 1_000),
    ]  # jd: no event at all
    j = judge_events(ACC, events)
    assert j["accepted"] == 4
    assert j["completed"] == 2
    assert j["duplicated"] == 1 and j["duplicated_jobs"] == ["jb"]
    assert j["lost"] == 2 and set(j["lost_jobs"]) == {"jc", "jd"}
    assert j["never_seen_by_scheduler"] == 1
    assert j["lost_by_last_event"] == {"JobRequeued": 1, "none": 1}
    assert j["lease_expired"] == 1 and j["leases"] == 3
    assert j["makespan_s"] == pytest.approx(1.0)  # accepted at 1.0 s, last terminal event at 2.0 s


def test_dispatch_latency_and_queue_wait_per_tier_and_tenant():
    events = [queued("ja", 2, 1_010), leased("ja", 3, 1_050), requeued("ja", 4, 3_000),
              leased("ja", 5, 3_400, epoch=2), succeeded("ja", 6, 4_000, epoch=2),
              queued("jb", 2, 1_020), leased("jb", 3, 1_220), succeeded("jb", 4, 2_000)]
    j = judge_events(ACC[:2], events)
    # ready -> leased for every lease: 40, 400, 200 ms
    assert j["dispatch_latency"]["n"] == 3
    assert j["dispatch_latency"]["p50_ms"] == 200.0 and j["dispatch_latency"]["p99_ms"] == 400.0
    # accepted at 1000 -> first lease
    assert j["queue_wait_by_tier"]["0"]["p50_ms"] == 50.0
    assert j["queue_wait_by_tier"]["9"]["p50_ms"] == 220.0
    assert j["queue_wait_by_tenant"] == {"acme": {"n": 1, "p50_ms": 50.0, "p99_ms": 50.0, "max_ms": 50.0},
                                         "globex": {"n": 1, "p50_ms": 220.0, "p99_ms": 220.0, "max_ms": 220.0}}
    # events out of order on the wire are ordered by version
    shuffled = judge_events(ACC[:2], list(reversed(events)))
    assert shuffled["dispatch_latency"] == j["dispatch_latency"]


def test_percentile_is_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    data = list(range(1, 101))
    assert percentile(data, 50) == 50 and percentile(data, 99) == 99 and percentile(data, 100) == 100
    with pytest.raises(ValueError):
        percentile(data, 101)


def test_gpu_accounting_counts_lost_steps_only_for_attempts_that_did_not_hand_over():
    attempts = [
        Attempt("ja", 1, "w1", 0, 7, 5, 0.4, 1.0, 2, "vanished"),   # steps 6,7 lost + 0.4 s cut short
        Attempt("ja", 2, "w2", 5, 15, 5, 0.0, 0.0, 0, "completed"),
        Attempt("jb", 1, "w3", 0, 4, 4, 0.3, 1.5, 1, "notice"),     # emergency checkpoint kept everything
        Attempt("jb", 2, "w4", 4, 3, 4, 0.0, 0.5, 1, "fenced"),     # 3 steps beyond its durable step
    ]
    lives = [WorkerLife("w1", 100.0, 5.0, 20.0), WorkerLife("w2", 3600.0, 5.0, 40.0)]
    g = gpu_accounting(attempts, lives, step_s=2.0, price_per_gpu_hour=3.0, completed=1)
    assert g["lost_steps"] == 2 + 3
    assert g["wasted_gpu_seconds"] == pytest.approx(5 * 2.0 + 0.7)
    assert g["checkpoint_overhead_gpu_seconds"] == pytest.approx(3.0)
    assert g["gpu_seconds_computing"] == pytest.approx(29 * 2.0)
    assert g["gpu_seconds_idle"] == pytest.approx(3700 - 10 - 60)
    assert g["estimated_cost_usd"] == pytest.approx(3700 / 3600 * 3.0)
    assert g["cost_per_completed_usd"] == pytest.approx(g["estimated_cost_usd"])
    assert g["attempts_by_outcome"] == {"vanished": 1, "completed": 1, "notice": 1, "fenced": 1}


def test_goodput_counts_only_steps_nobody_computes_again_in_the_stage_they_ended():
    # steps end at 1 s, 2 s, ...; the vanished attempt kept steps 1-2 (durable 2), lost 3-4
    vanished = Attempt("ja", 1, "w1", 0, 4, 2, 0.0, 0.0, 1, "vanished", (1000, 2000, 3000, 4000))
    resumed = Attempt("ja", 2, "w2", 2, 3, 2, 0.0, 0.0, 0, "completed", (11_000, 12_000, 13_000))
    fenced = Attempt("jb", 1, "w3", 5, 3, 6, 0.0, 0.0, 1, "fenced", (2500, 3500, 4500))  # kept step 6 only
    notice = Attempt("jc", 1, "w4", 0, 2, 2, 0.0, 0.0, 1, "notice", (5000, 6000))
    assert kept_step_times(vanished) == (1000, 2000)
    assert kept_step_times(fenced) == (2500,)
    assert kept_step_times(resumed) == resumed.step_end_ms and kept_step_times(notice) == (5000, 6000)
    stages = [{"from_ms": 0, "to_ms": 5000}, {"from_ms": 5000, "to_ms": 10_000}, {"from_ms": 10_000, "to_ms": 15_000}]
    gp = goodput_by_stage([vanished, resumed, fenced, notice], stages, step_s=10.0)
    assert gp == pytest.approx([3 * 10 / 5, 2 * 10 / 5, 3 * 10 / 5])
    assert goodput_hold(gp) == pytest.approx(2 / 3)   # the best stage is the first; the second fell to 2/3
    assert goodput_hold([1.0, 2.0, 4.0]) == 1.0        # a ramp that only grows holds all of its best
    assert goodput_hold([0.0, 0.0]) is None and goodput_hold([]) is None


def test_saturation_reasons():
    calm = {"cpu_cores": {"gateway": 0.3, "scheduler": 0.5, "simulator": 0.95}, "requests": 1000,
            "request_errors": 2, "heartbeat_rtt": {"p99_ms": 300.0}, "lease_expired": 1, "vanished": 3}
    assert saturated(calm, cores=2, lease_ttl_s=30.0) == []
    hot = {**calm, "cpu_cores": {"gateway": 0.97, "scheduler": 0.88}, "request_errors": 50,
           "heartbeat_rtt": {"p99_ms": 12_000.0}, "lease_expired": 9}
    why = saturated(hot, cores=2, lease_ttl_s=30.0)
    assert any("gateway" in w for w in why) and any("stack uses" in w for w in why)
    assert any("failed" in w for w in why) and any("heartbeat" in w for w in why)
    assert any("expired" in w for w in why)
    assert saturated({**calm, "lease_expired_under_live_workers": 1}, cores=2, lease_ttl_s=30.0) == [
        "1 leases expired under workers that had not vanished"]


def test_option_parsing_and_clear_errors():
    assert parse_shares("a:3,b:1", "--tenants") == (("a", 0.75), ("b", 0.25))
    assert parse_shares("0:1, 9", "--tiers", key=int) == ((0, 0.5), (9, 0.5))
    for bad in ("", "a:0", "a:x", "a,a"):
        with pytest.raises(ValueError, match="--tenants"):
            parse_shares(bad, "--tenants")
    assert parse_ramp("250,500") == (250, 500)
    with pytest.raises(ValueError, match="--workers"):
        parse_ramp("10,0")
    assert parse_policy("adaptive") == ("adaptive", None)
    assert parse_policy("fixed:30") == ("fixed", 30.0)
    for bad in ("fixed:", "fixed:-1", "sometimes"):
        with pytest.raises(ValueError, match="--checkpoint-policy"):
            parse_policy(bad)
    with pytest.raises(ValueError, match="--notice-share"):
        SimConfig(notice_share=1.5)
    with pytest.raises(ValueError, match="priorities"):
        SimConfig(tiers=((12, 1.0),))
    assert SimConfig(workers=(250, 500), stage_s=60).run_s == 120


def test_a_rate_per_stage_grows_the_demand_with_the_fleet() -> None:
    """`--rate 5,10,20` with `--workers 100,200,400`: each stage's arrivals come at its own rate (a ramp past
    saturation needs demand that grows; more workers at one rate only add idle pollers)."""
    from spotreel.fleetsim.config import parse_rate
    from spotreel.fleetsim.fleet import arrival_offsets

    assert parse_rate("20") == (20.0, ())
    assert parse_rate("5, 10,20") == (5.0, (5.0, 10.0, 20.0))
    with pytest.raises(ValueError):
        parse_rate("five")
    with pytest.raises(ValueError):
        SimConfig(workers=(100, 200), rate_by_stage=(5.0, 10.0, 20.0))
    with pytest.raises(ValueError):
        SimConfig(workers=(100,), rate_by_stage=(-1.0,))
    cfg = SimConfig(workers=(100, 200, 400, 800), stage_s=200.0, submit_rate=5.0, rate_by_stage=(5.0, 10.0, 0.0, 20.0))
    offsets = list(arrival_offsets(cfg, cfg.run_s))
    assert offsets == sorted(offsets) and all(0 < o < cfg.run_s for o in offsets)
    per_stage = [sum(1 for o in offsets if i * 200 <= o < (i + 1) * 200) for i in range(4)]
    assert per_stage[2] == 0  # a stage at rate 0 submits nothing
    for count, rate in zip((per_stage[0], per_stage[1], per_stage[3]), (5.0, 10.0, 20.0)):
        expected = rate * 200
        assert abs(count - expected) < 4 * expected ** 0.5, (per_stage, rate)  # Poisson: within 4 sigma


def test_one_rate_keeps_the_arrival_stream_other_benches_replay() -> None:
    """bench/peer_celery.py replays the simulator's arrivals from the same seed: with one rate the stream
    is the plain Poisson sequence of Random(seed).expovariate(rate)."""
    import random

    from spotreel.fleetsim.fleet import arrival_offsets

    cfg = SimConfig(workers=(10,), stage_s=30.0, submit_rate=3.0, seed=7)
    rng, t, expected = random.Random(7), 0.0, []
    while True:
        t += rng.expovariate(3.0)
        if t >= 30.0:
            break
        expected.append(t)
    assert list(arrival_offsets(cfg, 30.0)) == expected
    assert list(arrival_offsets(SimConfig(submit_rate=0.0), 60.0)) == []


def test_a_lease_the_run_itself_dropped_at_its_end_is_no_live_worker_losing_its_lease() -> None:
    from types import SimpleNamespace

    from spotreel.fleetsim.figures import Attempt
    from spotreel.services.simulator.run import expired_under_live_workers

    def attempt(job: str, outcome: str) -> Attempt:
        return Attempt(job, 1, "w-" + job, 0, 3, 0, 0.0, 0.0, 0, outcome)

    def expired(job: str, at_ms: int) -> SimpleNamespace:
        return type("LeaseExpired", (), {"job_id": job, "epoch": 1, "at_ms": at_ms})()

    attempts = [attempt("a", "vanished"), attempt("b", "stopped"), attempt("c", "stopped"), attempt("d", "fenced")]
    events = [expired("a", 500), expired("b", 2_000), expired("c", 900), expired("d", 950)]
    live = expired_under_live_workers(attempts, events, stopped_at_ms=1_000)
    # a vanished; b expired after the run stopped its worker; c and d expired while their workers lived.
    assert sorted(e.job_id for e in live) == ["c", "d"]
    assert sorted(e.job_id for e in expired_under_live_workers(attempts, events)) == ["b", "c", "d"]


async def test_the_meter_records_how_late_the_simulators_loop_wakes_and_hands_it_over_per_stage() -> None:
    """A round trip the simulator measures includes its own loop's queueing: the report states it beside."""
    meter = Meter()
    watch = asyncio.create_task(meter.watch_loop(every_s=0.02))
    await asyncio.sleep(0.1)
    time.sleep(0.08)  # the loop is busy: the next wake-up is about that late
    await asyncio.sleep(0.05)
    watch.cancel()
    stage = meter.take()
    assert len(stage.loop_lag) >= 3 and min(stage.loop_lag) >= 0.0
    assert max(stage.loop_lag) >= 50.0
    assert meter.loop_lag == [] and meter.rtt == {}


def test_a_lost_lease_comes_with_its_jobs_timeline_from_the_grant() -> None:
    """A run that lost a live worker's lease says what happened to that job (its topics are dropped)."""
    from spotreel.domain import events as ev
    from spotreel.fleetsim.figures import Attempt
    from spotreel.services.simulator.run import lease_timelines

    leased = ev.JobLeased("j1", 2, 10_000, "rw-1", "w1", "m@cpu", 1, 1, 12_000, 22_000, None, None, None)
    expired = ev.LeaseExpired("j1", 3, 22_500, "exp-1", 1, "w1", 1)
    other = ev.LeaseExpired("j2", 3, 22_500, "exp-2", 1, "w2", 1)
    attempts = [Attempt("j1", 1, "w1", 0, 3, 0, 0.0, 0.0, 0, "fenced", leased_at_ms=10_400)]
    from spotreel.domain import commands as cmd

    records = [(14_000, "command", cmd.RenewLease("hb-2", "j1", 1, "w1")), (10_300, "reply", None),
               (11_000, "command", cmd.RenewLease("hb-1", "j1", 1, "w1")),
               (11_000, "command", cmd.RenewLease("hb-9", "j2", 1, "w2"))]
    [timeline] = lease_timelines([expired], [expired, other, leased], attempts, records)
    assert timeline["job_id"] == "j1" and timeline["epoch"] == 1 and timeline["worker_id"] == "w1"
    assert timeline["events"] == ["JobLeased e1 +0 ms rw-1", "LeaseExpired e1 +12500 ms exp-1"]
    assert timeline["records"] == ["command RenewLease e1 +1000 ms hb-1", "command RenewLease e1 +4000 ms hb-2"]
    assert timeline["attempts"] == [{"epoch": 1, "worker_id": "w1", "outcome": "fenced", "leased_at": 400,
                                     "steps_done": 3}]
    assert lease_timelines([], [expired], attempts) == []
