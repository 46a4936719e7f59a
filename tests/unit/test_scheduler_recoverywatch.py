"""The recovery watch (services/scheduler/recoverywatch.py): which changelog partitions it seeks again, where
to, and what it does on a stand-in of Faust's recovery service and consumer."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

from faust.types import TP
from hypothesis import given, strategies as st

from spotreel.services.scheduler.recoverywatch import QUIET_S, RecoveryWatch, resume_offset, stalled


def test_nothing_is_stalled_before_a_recovery_started():
    assert stalled({"a": 5}, {}, None, {}, now=1e9) == []


def test_a_partition_silent_since_the_start_is_stalled_after_the_quiet_time():
    assert stalled({"a": 5}, {}, 100.0, {}, now=100.0 + QUIET_S - 0.1) == []
    assert stalled({"a": 5}, {}, 100.0, {}, now=100.0 + QUIET_S) == ["a"]


def test_a_record_read_or_a_nudge_restarts_the_quiet_time():
    q = QUIET_S
    assert stalled({"a": 5}, {"a": 100.0 + q / 2}, 100.0, {}, now=100.0 + q * 1.2) == []
    assert stalled({"a": 5}, {}, 100.0, {"a": 100.0 + q * 0.8}, now=100.0 + q * 1.2) == []
    assert stalled({"a": 5}, {"a": 100.0 + q / 2}, 100.0, {"a": 100.0 + q * 0.8}, now=100.0 + q * 1.8) == ["a"]


def test_a_partition_read_to_its_end_is_never_stalled():
    assert stalled({"a": 0, "b": -1, "c": 3}, {}, 0.0, {}, now=1e6) == ["c"]


def test_records_read_before_this_recovery_do_not_count():
    # `received_at` keeps a time from an earlier recovery: the quiet time runs from this one's start.
    assert stalled({"a": 5}, {"a": 10.0}, 100.0, {"a": 20.0}, now=100.0 + QUIET_S / 2) == []


@given(st.dictionaries(st.integers(0, 7), st.integers(-3, 50)),
       st.dictionaries(st.integers(0, 7), st.floats(0, 1000)),
       st.dictionaries(st.integers(0, 7), st.floats(0, 1000)),
       st.floats(0, 1000), st.floats(0, 2000))
def test_stalled_means_records_left_and_quiet_long_enough(remaining, received, nudged, started, now):
    out = stalled(remaining, received, started, nudged, now)
    assert len(out) == len(set(out))
    for tp in out:
        assert remaining[tp] > 0
        assert now - max(started, received.get(tp, started), nudged.get(tp, started)) >= QUIET_S
    for tp, left in remaining.items():
        if tp not in out:
            assert left <= 0 or now - max(started, received.get(tp, started), nudged.get(tp, started)) < QUIET_S


def test_resume_offset_is_after_the_last_applied_record():
    assert resume_offset(None) == 0
    assert resume_offset(-1) == 0
    assert resume_offset(0) == 1
    assert resume_offset(41) == 42


class FakeConsumer:
    def __init__(self):
        self.sought: list[dict] = []

    async def seek_wait(self, offsets):
        self.sought.append(dict(offsets))


def _app(in_recovery=True, highwaters=None, offsets=None, received=None, started=0.0):
    tp = {name: TP("jobs-changelog", int(name[1])) for name in ("c0", "c1", "c2")}
    rec = SimpleNamespace(in_recovery=in_recovery, _recovery_started_at=started,
                          _active_events_received_at={tp[k]: v for k, v in (received or {}).items()},
                          active_offsets=Counter({tp[k]: v for k, v in (offsets or {}).items()}))
    hw = {tp[k]: v for k, v in (highwaters or {}).items()}
    rec.active_remaining = lambda: Counter({t: h - rec.active_offsets.get(t, -1) for t, h in hw.items()})
    consumer = FakeConsumer()
    return SimpleNamespace(tables=SimpleNamespace(recovery=rec), consumer=consumer), tp


def _watch(app, now):
    nudges = []
    return RecoveryWatch(app, lambda: "flow", nudges.append, clock=lambda: now[0]), nudges


def test_the_watch_seeks_a_silent_partition_again_once_per_quiet_time():
    app, tp = _app(highwaters={"c0": 9, "c1": 4}, offsets={"c0": 9, "c1": 2}, received={"c1": 1.0})
    now = [QUIET_S + 1.0]
    watch, nudges = _watch(app, now)
    assert asyncio.run(watch.check()) == [tp["c1"]]
    assert app.consumer.sought == [{tp["c1"]: 3}] and nudges == [1]
    now[0] += QUIET_S / 2
    assert asyncio.run(watch.check()) == []
    now[0] += QUIET_S / 2
    assert asyncio.run(watch.check()) == [tp["c1"]]
    assert len(app.consumer.sought) == 2


def test_a_partition_never_read_is_read_again_from_its_start():
    app, tp = _app(highwaters={"c2": 7})
    watch, _ = _watch(app, [QUIET_S])
    assert asyncio.run(watch.check()) == [tp["c2"]]
    assert app.consumer.sought == [{tp["c2"]: 0}]


def test_the_watch_does_nothing_outside_recovery_or_on_a_faust_without_the_fields():
    app, _ = _app(in_recovery=False, highwaters={"c0": 7})
    watch, nudges = _watch(app, [1e6])
    assert asyncio.run(watch.check()) == [] and app.consumer.sought == [] and nudges == []
    app, _ = _app(highwaters={"c0": 7})
    del app.tables.recovery._recovery_started_at
    watch, nudges = _watch(app, [1e6])
    assert asyncio.run(watch.check()) == [] and app.consumer.sought == []
    watch, _ = _watch(SimpleNamespace(), [1e6])
    assert asyncio.run(watch.check()) == []


def test_the_faust_fields_the_watch_reads_are_there():
    """The watch turns itself off on a Faust without them: this test is what notices an upgrade that did."""
    import faust

    app = faust.App("recoverywatch-probe", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False,
                    autodiscover=False)
    rec = app.tables.recovery
    assert rec.in_recovery is False and rec._recovery_started_at is None
    assert rec._active_events_received_at == {} and rec.active_offsets == Counter()
    assert rec.active_remaining() == Counter()
    assert callable(app.consumer.seek_wait)


def test_a_seek_that_fails_is_logged_and_tried_again_after_the_quiet_time(caplog):
    app, tp = _app(highwaters={"c0": 7}, offsets={"c0": 3})
    calls = []

    async def broken(offsets):
        calls.append(offsets)
        raise TimeoutError("broker away")

    app.consumer.seek_wait = broken
    now = [QUIET_S]
    watch, nudges = _watch(app, now)
    assert asyncio.run(watch.check()) == [] and nudges == [] and len(calls) == 1
    assert "could not seek" in caplog.text
    now[0] += QUIET_S / 2
    asyncio.run(watch.check())
    assert len(calls) == 1
    now[0] += QUIET_S / 2
    asyncio.run(watch.check())
    assert calls == [{tp["c0"]: 4}] * 2
