"""The seeds' SLOs measured from a run's events topic (and, for the submit ack, from Prometheus).

Pure: decoded events in, a report out. Every time is an event's `at_ms`, stamped by the scheduler that
decided it, so the figures are the control plane's view:
- pickup: JobSubmitted (or its run_at, when later) -> the job's first JobLeased, per tier (priority);
- P0 submit -> start: the same for the top tier (`p0_priority`, default 9: higher goes first);
- completion: JobSubmitted (or run_at) -> JobSucceeded, per tier;
- preemption recovery: a lease lost to preemption (LeaseExpired or LeaseReleased that raised the job's
  preemption count; a confirmed cancel or pause and an unclaimed lease do not) -> the job's next JobLeased;
- submit ack: not on the events topic (the 202 is answered before the scheduler sees the command): read from
  the gateway's request histogram in Prometheus when one is given (slo_cli.ack_from_prometheus), else
  reported as not measured. Its verdict is exact although the histogram has buckets: 0.1 s is a bucket
  bound, so histogram_quantile's p99 is <= 0.1 exactly when 99% of the acks fell in buckets up to 0.1 s.

How each is judged against its target is in TARGETS; a figure with no sample is "no data", never "met".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from spotreel.fleetsim.figures import event_name, percentile


@dataclass(frozen=True)
class Target:
    name: str
    measure: str
    quantile: float  # nearest-rank percentile the target applies to
    limit_s: float


TARGETS = (
    Target("pickup", "submit -> first lease, each tier", 99, 30.0),
    Target("completion", "submit -> succeeded, each tier", 95, 300.0),
    Target("recovery", "preemption -> next lease", 95, 60.0),
    Target("p0_start_p50", "submit -> first lease, top tier", 50, 0.5),
    Target("p0_start_p99", "submit -> first lease, top tier", 99, 5.0),
    Target("ack", "POST /v1/videos answered 202 (gateway histogram)", 99, 0.1),
)
BY_NAME = {t.name: t for t in TARGETS}


def _stats(values_s: list[float]) -> dict[str, Any]:
    return {"n": len(values_s), "p50_s": percentile(values_s, 50), "p95_s": percentile(values_s, 95),
            "p99_s": percentile(values_s, 99), "max_s": max(values_s) if values_s else None}


def verdict(target: Target, values_s: list[float]) -> dict[str, Any]:
    value = percentile(values_s, target.quantile)
    return {"target": f"p{target.quantile:g} <= {target.limit_s:g} s", "measure": target.measure,
            "value_s": value, "n": len(values_s),
            "status": "no data" if value is None else ("met" if value <= target.limit_s else "missed")}


def measure(events: Iterable[Any], p0_priority: int = 9,
            submitted: tuple[int, int] | None = None) -> dict[str, Any]:
    """Samples (seconds) of every SLO measured on the events, per tier where the seeds say so. `submitted`:
    only the jobs whose JobSubmitted is stamped within [from_ms, to_ms) (one stage of a ramp, say); their
    whole lives count, also what happened after the window."""
    by_job: dict[str, list[Any]] = defaultdict(list)
    for e in events:
        if getattr(e, "job_id", None) is not None and hasattr(e, "at_ms"):
            by_job[e.job_id].append(e)
    pickup: dict[int, list[float]] = defaultdict(list)
    completion: dict[int, list[float]] = defaultdict(list)
    recovery: list[float] = []
    for evs in by_job.values():
        evs.sort(key=lambda e: getattr(e, "version", 0))
        first = next((e for e in evs if event_name(e) == "JobSubmitted"), None)
        if first is None:
            continue  # the run's window began after this job's submission
        if submitted is not None and not submitted[0] <= first.at_ms < submitted[1]:
            continue
        since = max(first.at_ms, first.run_at_ms or 0)
        tier = first.priority
        leased_once = False
        preempted_at: int | None = None
        count = 0
        for e in evs:
            n = event_name(e)
            if n == "JobReprioritized":
                tier = e.priority
            elif n == "JobLeased":
                if not leased_once:
                    pickup[tier].append(max(0, e.at_ms - since) / 1000)
                    leased_once = True
                if preempted_at is not None:
                    recovery.append(max(0, e.at_ms - preempted_at) / 1000)
                    preempted_at = None
            elif n in ("LeaseExpired", "LeaseReleased"):
                if e.preemptions > count:
                    preempted_at = e.at_ms
                count = e.preemptions
            elif n == "JobRequeued" and e.budget_reset:
                count = 0
            elif n == "JobSucceeded":
                completion[tier].append(max(0, e.at_ms - since) / 1000)
    return {"pickup": dict(pickup), "completion": dict(completion), "recovery": recovery,
            "p0": pickup.get(p0_priority, []), "p0_priority": p0_priority}


def ack_verdict(ack: dict[str, Any] | None) -> dict[str, Any]:
    """The submit ack's row from what Prometheus answered (slo_cli.ack_from_prometheus): {"p50", "p99" (s),
    "n" (acks counted between the window's first and last scrape), "error" (Prometheus did not answer), "note"}.
    Without a figure the status says why ("not measured": no Prometheus, or it did not answer; "no data": it
    answered, with no 202 to POST /v1/videos in the window) and the value is None: never a made-up number."""
    target = BY_NAME["ack"]
    row: dict[str, Any] = {"target": f"p99 <= {target.limit_s:g} s", "measure": target.measure, "value_s": None,
                           "n": None, "p50_s": None}
    if ack is None:
        return {**row, "status": "not measured",
                "note": "no --prometheus given (the ack is not on the events topic)"}
    if ack.get("error"):
        return {**row, "status": "not measured", "note": ack["error"]}
    n = ack.get("n")
    row["n"] = None if n is None else round(n)
    p99 = ack.get("p99")
    if p99 is None or (n is not None and n <= 0):
        return {**row, "status": "no data", "note": ack.get("note") or "no 202 to POST /v1/videos in the window"}
    return {**row, "value_s": p99, "p50_s": ack.get("p50"), "note": ack.get("note"),
            "status": "met" if p99 <= target.limit_s else "missed"}


def report(events: Iterable[Any], ack_s: dict[str, Any] | None = None, p0_priority: int = 9,
           submitted: tuple[int, int] | None = None) -> dict[str, Any]:
    """The SLO report: each target's verdict (per tier where it applies) and the distributions behind it.
    `ack_s`: what Prometheus answered about the submit ack (`ack_verdict`), or None without Prometheus;
    `submitted`: only jobs submitted within [from_ms, to_ms) (see `measure`)."""
    m = measure(events, p0_priority, submitted)
    tiers = sorted(set(m["pickup"]) | set(m["completion"]))
    slos: dict[str, Any] = {
        "pickup": {str(t): verdict(BY_NAME["pickup"], m["pickup"].get(t, [])) for t in tiers},
        "completion": {str(t): verdict(BY_NAME["completion"], m["completion"].get(t, [])) for t in tiers},
        "recovery": verdict(BY_NAME["recovery"], m["recovery"]),
        "p0_start_p50": verdict(BY_NAME["p0_start_p50"], m["p0"]),
        "p0_start_p99": verdict(BY_NAME["p0_start_p99"], m["p0"]),
    }
    slos["ack"] = ack_verdict(ack_s)
    return {
        "p0_priority": p0_priority,
        "slos": slos,
        "distributions": {
            "pickup_by_tier": {str(t): _stats(v) for t, v in sorted(m["pickup"].items())},
            "completion_by_tier": {str(t): _stats(v) for t, v in sorted(m["completion"].items())},
            "recovery": _stats(m["recovery"]),
            "ack_from_prometheus": ack_s,
        },
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"


def render_text(rep: dict[str, Any]) -> str:
    lines = [f"{'SLO':<22} {'tier':>4}  {'target':<16} {'value':>9}  {'n':>6}  status"]

    def row(name: str, tier: str, v: dict[str, Any]) -> None:
        n = "-" if v["n"] is None else str(v["n"])
        lines.append(f"{name:<22} {tier:>4}  {v['target']:<16} {_fmt(v['value_s']):>9}  {n:>6}  {v['status']}")

    slos = rep["slos"]
    for tier, v in slos["pickup"].items():
        row("pickup", tier, v)
    for tier, v in slos["completion"].items():
        row("completion", tier, v)
    row("preemption recovery", "all", slos["recovery"])
    p0 = str(rep["p0_priority"])
    row("P0 submit->start p50", p0, slos["p0_start_p50"])
    row("P0 submit->start p99", p0, slos["p0_start_p99"])
    ack = slos["ack"]
    row("submit ack", "all", ack)
    extra = [f"p50 {_fmt(ack['p50_s'])}"] if ack.get("p50_s") is not None else []
    if ack.get("note"):
        extra.append(ack["note"])
    if extra:
        lines.append(f"{'':<22} {'':>4}  submit ack: {'; '.join(extra)}")
    return "\n".join(lines)
