"""One fleet simulation: private services up, ramp the fleet stage by stage under load, drain, judge.

Per stage it records the CPU of every process, the round trips of worker and client requests and the
failures; at the end it reads the run's events back from Kafka and computes the figures
(spotreel.fleetsim.figures). The report is printed and written as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import aiohttp

from spotreel.fleetsim.config import SimConfig
from spotreel.fleetsim.figures import (gpu_accounting, goodput_by_stage, goodput_hold,
                                                    interval_by_stage, judge_events, saturated, summary_ms)
from spotreel.fleetsim.fleet import Fleet, Meter, Shared, submit_loop
from spotreel.services.simulator.kafka_link import KafkaLink
from spotreel.services.simulator.stack import CpuWindow, PrivateStack, read_command_mix, read_events, read_job_records
from spotreel.config.settings import Settings


def _meter_figures(m: Meter) -> dict[str, Any]:
    rtt = {k: summary_ms(v) for k, v in sorted(m.rtt.items())}
    return {"requests": sum(len(v) for v in m.rtt.values()) + sum(m.errors.values()),
            "request_errors": sum(m.errors.values()), "errors_by_kind": dict(m.errors),
            "statuses": dict(sorted(m.statuses.items())), "rtt": rtt,
            # Both renew the lease (a running worker sends progress only), so both say whether leases are safe.
            "heartbeat_rtt": summary_ms([*m.rtt.get("heartbeat", []), *m.rtt.get("progress", [])]),
            "simulator_loop_lag": summary_ms(m.loop_lag),
            "renewal_verdict_wait": summary_ms(m.verdict_wait) if m.verdict_wait else None,
            "simulator_gc_full": {**summary_ms(m.gc_full_ms), "total_ms": round(sum(m.gc_full_ms), 1)}}


def _per_s(counts: dict[str, int], kinds: tuple[str, ...], seconds: float) -> float:
    return round(sum(v for k, v in counts.items() if k.split(":")[0] in kinds) / max(seconds, 1e-6), 1)


async def _run(cfg: SimConfig, stack: PrivateStack, say: Callable[[str], None]) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        sh = Shared(cfg=cfg, base_url=stack.url, worker_key=stack.worker_key, tenant_keys=stack.tenant_keys,
                    model=stack.model, gpu_type="sim-gpu", session=session, rng=random.Random(cfg.seed))
        if cfg.transport == "kafka":
            sh.link = KafkaLink(stack.settings, lease_ttl_ms=int(cfg.lease_ttl_s * 1000),
                                on_renewal_verdict=lambda ms: sh.meter.verdict_wait.append(ms), seed=cfg.seed)
            await sh.link.start()
        try:
            return await _ramp(cfg, stack, sh, say)
        finally:
            if sh.link is not None:
                sh.link.close()


async def _ramp(cfg: SimConfig, stack: PrivateStack, sh: Shared, say: Callable[[str], None]) -> dict[str, Any]:
    fleet = Fleet(sh, stack.settings.topic_prefix.split(".", 1)[1])
    window = CpuWindow(stack.pids())
    t_start = time.monotonic()
    submitter = asyncio.create_task(submit_loop(sh, t_start + cfg.run_s))
    lag_watch = asyncio.create_task(sh.meter.watch_loop())
    unwatch_gc = sh.meter.watch_gc()
    staller = asyncio.create_task(_stall(stack, cfg, t_start, say)) if cfg.stall_s > 0 else None
    stages = []
    for i, size in enumerate(cfg.workers):
        fleet.set_mtbf(cfg.stage_mtbf_s(i))
        fleet.resize(size)
        window.start()
        sh.meter.take()
        wall0 = time.time()
        await asyncio.sleep(cfg.stage_s)
        stage = {"stage": i + 1, "workers": size, "submit_rate": cfg.stage_rate(i), "alive": len(fleet.tasks),
                 "from_ms": int(wall0 * 1000),
                 "to_ms": int(time.time() * 1000), **window.read(), **_meter_figures(sh.meter.take())}
        stage["worker_requests_per_s"] = _per_s(stage["statuses"], ("lease", "heartbeat", "progress",
                                                                     "checkpoint", "complete", "release"),
                                                stage["seconds"])
        stage["vanished"] = sum(1 for t in sh.vanished_at if wall0 <= t < time.time())
        stages.append(stage)
        say(f"stage {i + 1}: {size} workers at {cfg.stage_rate(i):g} submissions/s, cpu {stage['cpu_cores']}, machine {stage['cpu_cores_total']}, "
            f"{stage['worker_requests_per_s']} worker req/s, renewal p99 "
            f"{stage['heartbeat_rtt'].get('p99_ms')} ms, errors {stage['request_errors']}")
    await submitter
    say(f"submissions stopped ({len(sh.accepted)} accepted); draining up to {cfg.drain_s:.0f} s")
    drain_end = time.monotonic() + cfg.drain_s
    while time.monotonic() < drain_end:
        done = {a.job_id for a in sh.attempts if a.outcome == "completed"}
        if all(a.job_id in done for a in sh.accepted):
            break
        await asyncio.sleep(1.0)
    stopped_at_ms = int(time.time() * 1000)
    lag_watch.cancel()
    unwatch_gc()
    await fleet.stop()
    if staller is not None:
        await staller
    return {"sh": sh, "stages": stages, "elapsed_s": time.monotonic() - t_start, "workers_made": fleet.made,
            "stopped_at_ms": stopped_at_ms}


async def _stall(stack: PrivateStack, cfg: SimConfig, t_start: float, say: Callable[[str], None]) -> None:
    """Freeze the private scheduler (the fleet keeps renewing, the commands pile up unread) or gateway (the HTTP
    workers' requests pile up in its sockets) for a while."""
    await asyncio.sleep(max(0.0, t_start + cfg.stall_at_s - time.monotonic()))
    target = cfg.stall_target
    pid = stack.pids()[target]
    os.kill(pid, signal.SIGSTOP)
    say(f"{target} (pid {pid}) frozen for {cfg.stall_s:.0f} s")
    try:
        await asyncio.sleep(cfg.stall_s)
    finally:
        os.kill(pid, signal.SIGCONT)
    say(f"{target} running again")


def expired_under_live_workers(attempts: list, events: list[Any], stopped_at_ms: int | None = None) -> list[Any]:
    """LeaseExpired events whose holder did not vanish: live workers that lost their lease (should be none).
    A lease the run itself ended (`stopped`: work still running when the drain ran out, dropped without a
    release) that expires after `stopped_at_ms` had no live holder any more: not counted."""
    vanished = {(a.job_id, a.epoch) for a in attempts if a.outcome == "vanished"}
    stopped = {(a.job_id, a.epoch) for a in attempts if a.outcome == "stopped"} if stopped_at_ms is not None else set()
    return [e for e in events if type(e).__name__ == "LeaseExpired" and (e.job_id, e.epoch) not in vanished
            and not ((e.job_id, e.epoch) in stopped and e.at_ms >= stopped_at_ms)]


def _epoch(event: Any) -> str | None:
    epoch = getattr(event, "epoch", None)
    return None if epoch is None else f"e{epoch}"


def lease_timelines(under_live: list[Any], events: list[Any], attempts: list,
                    records: list[tuple[int, str, Any]] = (), most: int = 5) -> list[dict[str, Any]]:
    """For the first `most` leases lost under live workers: every event of the job (name, epoch where it has
    one, ms from the lease's grant, the command that caused it), every command and reply keyed by it
    (`records`: append ms, kind, record; the commands at their append time) and what the simulated holder
    made of each attempt, so a failed run says what happened without its topics (dropped unless --keep)."""
    out = []
    for lost in under_live[:most]:
        mine = sorted((e for e in events if getattr(e, "job_id", None) == lost.job_id), key=lambda e: e.at_ms)
        granted = next((e.at_ms for e in mine if type(e).__name__ == "JobLeased" and e.epoch == lost.epoch),
                       mine[0].at_ms if mine else 0)
        sent = sorted(((at, kind, r) for at, kind, r in records if getattr(r, "job_id", None) == lost.job_id),
                      key=lambda rec: rec[0])
        out.append({
            "job_id": lost.job_id, "epoch": lost.epoch, "worker_id": lost.worker_id,
            "events": [" ".join(filter(None, (type(e).__name__, _epoch(e), f"{e.at_ms - granted:+d} ms",
                                              getattr(e, "reason", None), e.causation_id)))
                       for e in mine[:60]],
            "records": [" ".join(filter(None, (kind, type(r).__name__, _epoch(r), f"{at - granted:+d} ms",
                                               getattr(r, "command_id", None) or getattr(r, "causation_id", None))))
                        for at, kind, r in sent[:120]],
            "attempts": [{"epoch": a.epoch, "worker_id": a.worker_id, "outcome": a.outcome,
                          "leased_at": a.leased_at_ms - granted, "steps_done": a.steps_done}
                         for a in attempts if a.job_id == lost.job_id],
        })
    return out


def _stopped_by_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def simulate(cfg: SimConfig, base: Settings, out: Path | None, *, partitions: int = 6, keep: bool = False,
             say: Callable[[str], None] = print, replica_counts: dict[str, int] | None = None) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:10]
    stack = PrivateStack(base, run_id, partitions, say, replica_counts)
    say(f"simulation {run_id}: private services on {stack.url}, topics {stack.settings.topic_prefix}.*"
        + ("" if stack.replicas.single else f", replicas {stack.replicas.describe()}"))
    # A run stopped with SIGTERM (`kill`, a CI timeout, a terminal closed) stops its private services and drops
    # its topics and keyspace as Ctrl-C does; without this the default action ended the process at once and
    # left four services running, bound to their ports, for good.
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stopped_by_sigterm) if on_main else None
    try:
        stack.start([t for t, _ in cfg.tenants], quota=max(100, max(cfg.workers) * 2))
        result = asyncio.run(_run(cfg, stack, say))
        time.sleep(2.0)  # the last verdicts' events are written before their answers; let stragglers land
        events = read_events(stack.settings)
        commands = read_command_mix(stack.settings)
        sh = result["sh"]
        under_live = expired_under_live_workers(sh.attempts, events, result["stopped_at_ms"])
        # What the holders of the first lost leases sent and were answered, before the topics are dropped.
        records: list[tuple[int, str, Any]] = []
        if under_live:
            try:
                records = read_job_records(stack.settings, {e.job_id for e in under_live[:5]})
            except Exception as exc:  # the report matters more than this detail of it
                say(f"could not read the lost leases' commands and replies: {exc}")
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop short
        try:
            stack.stop(drop=not keep)
        finally:
            if on_main:
                signal.signal(signal.SIGTERM, previous)
    judged = judge_events(sh.accepted, events)
    expired = [e for e in events if type(e).__name__ == "LeaseExpired"]
    goodput = goodput_by_stage(sh.attempts, result["stages"], cfg.step_s)
    for i, (st, ivl) in enumerate(zip(result["stages"], interval_by_stage(sh.attempts, result["stages"]))):
        st["mtbf_s"] = cfg.stage_mtbf_s(i)
        st["checkpointing"] = ivl
    for st, gp in zip(result["stages"], goodput):
        st["lease_expired"] = sum(1 for e in expired if st["from_ms"] <= e.at_ms < st["to_ms"])
        st["lease_expired_under_live_workers"] = sum(1 for e in under_live if st["from_ms"] <= e.at_ms < st["to_ms"])
        st["goodput_gpu_s_per_s"] = round(gp, 2)
        st["saturated_because"] = saturated(st, os.cpu_count() or 1, lease_ttl_s=cfg.lease_ttl_s)
    first_sat = next((st["workers"] for st in result["stages"] if st["saturated_because"]), None)
    report = {
        "run_id": run_id, "config": {k: v for k, v in cfg.__dict__.items()},
        # the interval before the pool measured anything (the prior's); per stage: stages[].checkpointing
        "checkpoint_interval_s": sh.interval_s(), "prior_mtbf_s": cfg.prior_mtbf_s,
        "elapsed_s": round(result["elapsed_s"], 1),
        "workers_made": result["workers_made"], "submissions_refused": dict(sh.refused),
        **judged,
        "lease_expired_under_live_workers": len(under_live),
        # (job, epoch, holder) of each: which leases to look up in the run's events (--keep)
        "lease_expired_under_live_workers_list": [(e.job_id, e.epoch, e.worker_id) for e in under_live[:20]],
        "lease_expired_under_live_workers_timelines": lease_timelines(under_live, events, sh.attempts, records),
        "goodput_by_stage": [round(g, 2) for g in goodput], "goodput_hold": goodput_hold(goodput),
        "vanished": sum(1 for a in sh.attempts if a.outcome == "vanished"),
        "worker_transport": cfg.transport, "replicas": stack.replicas.counts,
        # Kafka workers are their own lease desk: grants that reached no waiting lease call, handed back.
        "unclaimed_released_by_workers": sh.link.released_unclaimed if sh.link is not None else None,
        **gpu_accounting(sh.attempts, sh.lives, cfg.step_s, cfg.price_per_gpu_hour, judged["completed"]),
        "stages": result["stages"], "saturates_at_workers": first_sat,
        "events_read": len(events), "command_records": commands, "cpu_cores_of_machine": os.cpu_count(),
    }
    say(render(report))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str))
        say(f"figures written to {out}")
    return report


def render(r: dict[str, Any]) -> str:
    d = r["dispatch_latency"]
    lines = [
        f"accepted {r['accepted']}  completed {r['completed']}  lost {r['lost']} {r['lost_by_last_event'] or ''}  "
        f"duplicated {r['duplicated']}  failed {r['failed']}  dead-lettered {r['dead_lettered']}  "
        f"refused {r['submissions_refused'] or 0}",
        f"leases {r['leases']}  expired {r['lease_expired']} (under live workers "
        f"{r['lease_expired_under_live_workers']}, vanished {r['vanished']})  released {r['lease_released']}  "
        f"attempts {r['attempts_by_outcome']}  checkpoint interval {r['checkpoint_interval_s']}",
        f"dispatch latency (ready -> leased) p50 {d['p50_ms']} ms  p99 {d['p99_ms']} ms  (n={d['n']})",
    ]
    mix = r.get("command_records") or {}
    if mix:
        records = sum(v for k, v in mix.items() if not k.endswith("_in_batches"))
        batches = mix.get("RenewalBatch", 0)
        carried = (f", {mix['renewals_in_batches'] / batches:.1f} renewals and "
                   f"{mix.get('requests_in_batches', 0) / batches:.1f} lease requests each" if batches else "")
        lines.append(f"commands topic: {records} records, {batches} of them renewal batches{carried}")
    for label, key in (("tier", "queue_wait_by_tier"), ("tenant", "queue_wait_by_tenant")):
        parts = [f"{k}: p50 {v['p50_ms']} / p99 {v['p99_ms']} ms" for k, v in r[key].items()]
        lines.append(f"queue wait by {label}: " + "; ".join(parts))
    lines.append(
        f"GPU-s billed {r['gpu_seconds_billed']:.0f} (cold {r['gpu_seconds_cold_start']:.0f}, idle "
        f"{r['gpu_seconds_idle']:.0f}, computing {r['gpu_seconds_computing']:.0f})  wasted "
        f"{r['wasted_gpu_seconds']:.0f}  checkpoint overhead {r['checkpoint_overhead_gpu_seconds']:.0f}  "
        f"cost ${r['estimated_cost_usd']:.2f} at ${r['price_per_gpu_hour_usd']}/GPU-h")
    for st in r["stages"]:
        lines.append(f"  stage {st['stage']}: {st['workers']} workers  {st.get('submit_rate', '?')}/s  cpu {st['cpu_cores']}  total "
                     f"{st['cpu_cores_total']}  {st['worker_requests_per_s']} req/s  renewal p99 "
                     f"{st['heartbeat_rtt'].get('p99_ms')} ms  goodput {st['goodput_gpu_s_per_s']} GPU-s/s  expired "
                     f"under live workers {st['lease_expired_under_live_workers']}  -> "
                     f"{'; '.join(st['saturated_because']) or 'keeps up'}")
    lines.append(f"checkpoint interval by stage ({r['config']['policy']}; prior MTBF "
                 f"{r.get('prior_mtbf_s')} s, weight {r['config']['mtbf_prior_losses']} losses):")
    lines.append("  | stage | machines' MTBF s | leases | lost | MTBF estimated at lease (p50) s | interval p50 "
                 "[min, max] s | checkpoints | checkpoint GPU-s |")
    lines.append("  |---|---|---|---|---|---|---|---|")
    for st in r["stages"]:
        c = st["checkpointing"]
        est = "n/a" if c["mtbf_estimate_p50_s"] is None else f"{c['mtbf_estimate_p50_s']:.0f}"
        iv = ("none" if c["interval_p50_s"] is None else
              f"{c['interval_p50_s']:.1f} [{c['interval_min_s']:.1f}, {c['interval_max_s']:.1f}]")
        lines.append(f"  | {st['stage']} | {st['mtbf_s']:g} | {c['leases']} | {c['lost_leases']} | {est} | {iv} | "
                     f"{c['checkpoints']} | {c['checkpoint_gpu_s']} |")
    hold = r["goodput_hold"]
    lines.append(f"saturates at: {r['saturates_at_workers'] or 'not within the ramp'} workers;  goodput from the best "
                 f"stage on holds {'n/a' if hold is None else f'{hold:.0%}'} of the best")
    return "\n".join(lines)

