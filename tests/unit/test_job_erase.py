"""EraseJob in the domain: a live job is cancelled first, every state records JobErased (finished and evicted
ones too), the erased state keeps no personal field, and the history still folds to the same state."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain import retention
from spotreel.domain.evolve import fold
from spotreel.domain.state import Status
from tests.unit.jobkit import Driver, kinds

pytestmark = pytest.mark.unit


def _erase(d: Driver, by: str = "tenant:t1"):
    return d.send(c.EraseJob(d.next_id("erase"), d.job_id, by=by))


def _driver() -> Driver:
    d = Driver()
    d.submit(callback_url="https://hooks.example.test/x")
    return d


def test_erasing_a_queued_job_cancels_it_then_records_who_erased_it():
    d = _driver()
    out = _erase(d)
    assert kinds(out) == ["JobCancelled", "JobErased"]
    assert out[0].reason == "erased" and out[1].by == "tenant:t1"
    assert d.s.status == Status.CANCELLED
    assert d.s.spec.prompt == "" and d.s.spec.negative_prompt is None and d.s.callback_url is None
    assert [e.version for e in out] == [d.s.version - 1, d.s.version]


def test_erasing_a_leased_job_asks_its_holder_to_stop_and_the_cancel_completes_on_release():
    d = _driver()
    d.grant()
    out = _erase(d)
    assert kinds(out) == ["CancelRequested", "JobErased"]
    assert d.s.cancel_requested and d.s.spec.prompt == ""
    assert kinds(d.release(reason="cancelled"))[-1] == "JobCancelled"
    assert kinds(_erase(d)) == ["JobErased"]  # again, once finished: recorded, not refused


def test_erasing_a_finished_or_evicted_job_is_recorded():
    d = _driver()
    d.grant()
    d.complete()
    assert kinds(_erase(d)) == ["JobErased"] and d.s.status == Status.SUCCEEDED
    summary = retention.summarize(d.s)
    d.state = summary
    out = _erase(d, by="operator:ops")
    assert kinds(out) == ["JobErased"] and out[0].version == summary.version + 1
    assert d.s.evicted


def test_an_unknown_job_is_refused_and_the_history_refolds_to_the_erased_state():
    d = Driver()
    out = d.send(c.EraseJob("e1", "j" + "0" * 32, by="tenant:t1"))
    assert kinds(out) == ["CommandRejected"]
    d = _driver()
    d.grant()
    _erase(d)
    d.expire()
    assert fold(d.history) == d.s
