"""Realistic job histories for projection tests, made by driving the domain's decide (tests/unit/jobkit.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from spotreel.domain import commands as c
from tests.unit.jobkit import T0, Driver

ACTIONS = ("grant", "grant_w2", "renew", "progress", "checkpoint", "complete", "fail", "fail_final", "release",
           "expire", "cancel", "pause", "resume", "requeue", "reprioritize", "activate", "stale", "preempt")


def drive(d: Driver, action: str, pct: float, step: int) -> None:
    match action:
        case "grant":
            d.grant()
        case "grant_w2":
            d.grant(worker="w2")
        case "renew":
            d.renew()
        case "progress":
            d.progress(pct, step)
        case "checkpoint":
            d.checkpoint(step, pct)
        case "complete":
            d.complete()
        case "fail":
            d.fail()
        case "fail_final":
            d.fail(retryable=False)
        case "release":
            d.release()
        case "expire":
            d.expire()
        case "cancel":
            d.cancel()
        case "pause":
            d.pause()
        case "resume":
            d.resume()
        case "requeue":
            d.requeue()
        case "reprioritize":
            d.send(c.Reprioritize(d.next_id("prio"), d.job_id, step))
        case "activate":
            d.activate(advance=400_000)
        case "preempt":
            if d.s.lease is not None:
                d.send(c.PreemptLease(d.next_id("preempt"), d.job_id, d.s.lease.epoch, 10))
        case "stale":
            d.progress(pct, step, epoch=1, worker="w0")


def history(key: str, steps: list[tuple[str, float, int]], tenant: str = "acme", now: int = T0,
            **submit: Any) -> list[Any]:
    d = Driver(now=now)
    d.submit(key=key, tenant=tenant, **submit)
    for action, pct, step in steps:
        d.now += 1000
        drive(d, action, pct, step)
    return d.history


steps_strategy = st.lists(
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 100).map(float), st.integers(0, 30)), max_size=30)


@st.composite
def histories(draw: st.DrawFn, key: str = "k1") -> list[Any]:
    submit: dict[str, Any] = {}
    if draw(st.booleans()):
        submit["run_at_ms"] = T0 + 5000
    submit["max_attempts"] = draw(st.integers(1, 4))
    return history(key, draw(steps_strategy), **submit)
