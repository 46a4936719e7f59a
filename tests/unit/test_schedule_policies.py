"""The cron schedule aggregate's pause/resume, overlap policies (allow, skip, cancel_previous), the outcome
of each occurrence's job reported back (EndOccurrence), and a schedule read in a local time zone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.evolve import fold
from spotreel.domain.schedules import cancels_for, fold_schedule, submit_for
from spotreel.domain.timers import schedule_timers
from spotreel.domain.spec import RenderSpec
from spotreel.services.scheduler import followups, statecodec
from tests.unit.test_job_schedules import HOUR, MIN, T, Sched, _fired, _rejected

pytestmark = pytest.mark.unit


def types(out: tuple[Any, ...]) -> list[str]:
    return [type(e).__name__ for e in out]


def end(s: Sched, occurrence: int, now: int, outcome: str = "succeeded") -> tuple[Any, ...]:
    return s.send(c.EndOccurrence(f"end-{occurrence}", "nightly", occurrence, outcome), now)


def test_pause_stops_the_timer_and_resume_skips_what_fell_in_the_pause() -> None:
    s = Sched(missed_policy="run_all")
    assert types(s.send(c.PauseSchedule("p", "nightly"), T + 10 * MIN)) == ["SchedulePaused"]
    assert s.state is not None and s.state.paused and schedule_timers(s.state) == ()
    assert _rejected(s.fire(T + HOUR)) == "schedule_paused"
    assert _rejected(s.send(c.PauseSchedule("p2", "nightly"), T + HOUR)) == "already_paused"
    out = s.send(c.ResumeSchedule("r", "nightly"), T + 3 * HOUR + 5 * MIN)
    assert types(out) == ["OccurrencesSkipped", "ScheduleResumed"]
    skipped, resumed = out
    assert (skipped.first_occurrence_ms, skipped.last_occurrence_ms, skipped.reason) == (T + HOUR, T + 3 * HOUR, "paused")
    assert (resumed.through_ms, resumed.next_occurrence_ms) == (T + 3 * HOUR + 5 * MIN, T + 4 * HOUR)
    assert not s.state.paused and [t.at_ms for t in schedule_timers(s.state)] == [T + 4 * HOUR]
    # run_all would have caught the paused hours up; after a resume only what is due from now on fires.
    assert _fired(s.fire(T + 4 * HOUR)) == [T + 4 * HOUR]
    assert _rejected(s.send(c.ResumeSchedule("r2", "nightly"), T + 4 * HOUR)) == "not_paused"


def test_a_short_pause_between_occurrences_skips_nothing() -> None:
    s = Sched()
    s.send(c.PauseSchedule("p", "nightly"), T + 10 * MIN)
    assert types(s.send(c.ResumeSchedule("r", "nightly"), T + 20 * MIN)) == ["ScheduleResumed"]
    assert _fired(s.fire(T + HOUR)) == [T + HOUR]


def test_a_deleted_schedule_refuses_commands_but_records_outcomes() -> None:
    s = Sched()
    s.fire(T + HOUR)
    s.send(c.DeleteSchedule("d", "nightly"), T + HOUR + MIN)
    for command in (c.PauseSchedule("p", "nightly"), c.ResumeSchedule("r", "nightly"), c.FireOccurrence("f", "nightly")):
        assert _rejected(s.send(command, T + 2 * HOUR)) == "schedule_deleted"
    [ended] = end(s, T + HOUR, T + 2 * HOUR, "failed")
    assert isinstance(ended, ev.OccurrenceEnded) and ended.outcome == "failed"
    assert ended.job_id == ids.job_id_for_occurrence("acme", "nightly", T + HOUR)
    assert s.state is not None and s.state.running == ()
    assert _rejected(end(s, T + HOUR, T + 2 * HOUR)) == "not_running"  # reported twice: once recorded
    assert _rejected(s.send(c.PauseSchedule("p", "x"), T)) == "schedule_deleted"  # state is nightly's


def test_allow_fires_while_the_previous_job_runs() -> None:
    s = Sched(overlap_policy="allow")
    assert _fired(s.fire(T + HOUR)) == [T + HOUR]
    assert _fired(s.fire(T + 2 * HOUR)) == [T + 2 * HOUR]
    assert s.state is not None and s.state.running == (T + HOUR, T + 2 * HOUR)


def test_skip_does_not_fire_while_an_earlier_job_runs_and_fires_again_once_it_ended() -> None:
    s = Sched(overlap_policy="skip", missed_policy="run_all")
    assert _fired(s.fire(T + HOUR)) == [T + HOUR]
    out = s.fire(T + 2 * HOUR)
    assert _fired(out) == [] and types(out) == ["OccurrencesSkipped", "ScheduleAdvanced"]
    assert (out[0].first_occurrence_ms, out[0].last_occurrence_ms, out[0].reason) == (T + 2 * HOUR, T + 2 * HOUR,
                                                                                      "overlap")
    end(s, T + HOUR, T + 2 * HOUR + MIN)
    assert _fired(s.fire(T + 3 * HOUR)) == [T + 3 * HOUR]
    # A catch-up of several occurrences with nothing running fires the first and skips the rest.
    end(s, T + 3 * HOUR, T + 3 * HOUR + MIN)
    out = s.fire(T + 6 * HOUR)
    assert _fired(out) == [T + 4 * HOUR]
    assert [(e.first_occurrence_ms, e.reason) for e in out if isinstance(e, ev.OccurrencesSkipped)] == [
        (T + 5 * HOUR, "overlap"), (T + 6 * HOUR, "overlap")]


def test_cancel_previous_fires_and_cancels_every_earlier_running_job_once() -> None:
    s = Sched(overlap_policy="cancel_previous", missed_policy="run_all")
    [first] = [e for e in s.fire(T + HOUR) if isinstance(e, ev.OccurrenceFired)]
    assert cancels_for(s.state, first) == []
    out = s.fire(T + 3 * HOUR)  # two fire at once: the newest cancels the two before it
    fired = [e for e in out if isinstance(e, ev.OccurrenceFired)]
    assert [e.occurrence_ms for e in fired] == [T + 2 * HOUR, T + 3 * HOUR]
    sent = [cmd for e in out for cmd in followups.for_schedule_event(e, s.state)]
    cancels = [cmd for cmd in sent if isinstance(cmd, c.CancelJob)]
    assert [cmd.job_id for cmd in cancels] == [ids.job_id_for_occurrence("acme", "nightly", o)
                                               for o in (T + HOUR, T + 2 * HOUR)]
    assert {cmd.reason for cmd in cancels} == {"overlap"}
    assert [type(cmd).__name__ for cmd in sent] == ["SubmitJob", "SubmitJob", "CancelJob", "CancelJob"]


def test_a_terminal_occurrence_job_reports_back_to_its_schedule() -> None:
    s = Sched(overlap_policy="skip")
    [fired] = [e for e in s.fire(T + HOUR) if isinstance(e, ev.OccurrenceFired)]
    assert s.state is not None
    job = fold(decide(None, submit_for(s.state, fired), T + HOUR))
    out = decide(job, c.CancelJob("x", fired.job_id, reason="overlap"), T + HOUR + MIN)
    after = fold(out, job)
    [report] = [cmd for e in out for cmd in followups.for_job_event(e, after)]
    assert report == c.EndOccurrence(f"ended:{fired.job_id}:{out[0].version}", "nightly", T + HOUR, "cancelled")
    assert followups.key_of(report) == "nightly"
    assert types(s.send(report, T + HOUR + 2 * MIN)) == ["OccurrenceEnded"]
    # A job that is not an occurrence's reports nothing.
    plain = fold(decide(None, c.SubmitJob("s", ids.job_id_for("acme", "k"), "acme", "k", "h", "g",
                                                   RenderSpec("m", "p", 1.0, "512x512", 8, 1, 4)), T))
    cancelled = decide(plain, c.CancelJob("x", plain.job_id), T)
    assert [cmd for e in cancelled for cmd in followups.for_job_event(e, fold(cancelled, plain))] == []


def test_the_scheduler_table_keeps_pause_and_running() -> None:
    s = Sched(overlap_policy="skip")
    s.fire(T + HOUR)
    s.send(c.PauseSchedule("p", "nightly"), T + HOUR + MIN)
    assert statecodec.loads_schedule(statecodec.dumps_schedule(s.state)) == s.state


def test_a_schedule_in_a_local_zone_fires_at_local_times_across_dst() -> None:
    # 09:00 daily in New York; DST starts 2026-03-08 (EST -5 -> EDT -4).
    start = 1_772_841_600_000  # 2026-03-07 00:00 UTC
    s = Sched(now=start, cron="0 9 * * *", timezone="America/New_York", missed_policy="run_all")
    assert s.state is not None and s.state.next_occurrence_ms == start + 14 * HOUR  # 09:00 EST
    assert _fired(s.fire(start + 14 * HOUR)) == [start + 14 * HOUR]
    assert s.state.next_occurrence_ms == start + 24 * HOUR + 13 * HOUR  # 09:00 EDT


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["allow", "skip", "cancel_previous"]),
       steps=st.lists(st.tuples(st.integers(0, 3 * HOUR), st.booleans()), min_size=1, max_size=8))
def test_overlap_never_fires_twice_and_skip_never_runs_two_at_once(policy: str, steps: list) -> None:
    s = Sched(overlap_policy=policy, missed_policy="run_all")
    now, seen = T + 5 * MIN, []
    for gap, finish in steps:
        now += gap
        if s.state is not None and now >= s.state.next_occurrence_ms:
            running_before = s.state.running
            fired = _fired(s.fire(now))
            if policy == "skip":
                assert len(fired) <= 1 and (not running_before or fired == [])
            seen += fired
        if finish and s.state is not None and s.state.running:
            end(s, s.state.running[0], now)
    assert seen == sorted(set(seen))
    assert fold_schedule(s.history) == s.state


@settings(max_examples=60, deadline=None)
@given(tz=st.sampled_from(["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago"]),
       expr=st.sampled_from(["*/20 * * * *", "0 * * * *", "30 1,2 * * *", "15 2 * * *"]),
       around=st.sampled_from([1_772_949_600_000, 1_793_509_200_000, 1_774_746_000_000, 1_792_890_000_000,
                               1_775_314_800_000, 1_791_126_000_000]),  # DST changes in 2026 of those zones
       gaps=st.lists(st.integers(1, 4 * HOUR), min_size=1, max_size=10))
def test_across_dst_every_occurrence_fires_once_in_order_and_no_local_time_twice(tz, expr, around, gaps):
    """run_all and ticks at arbitrary moments around a DST change: the fired occurrences are exactly the
    cron walk's, strictly increasing, none twice for one local time."""
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from spotreel.domain.cron import CronSchedule

    start = around - 6 * HOUR
    s = Sched(now=start, cron=expr, timezone=tz, missed_policy="run_all", max_catchup=1000)
    now, fired = start, []
    for gap in gaps:
        now += gap
        if s.state is not None and now >= s.state.next_occurrence_ms:
            fired += _fired(s.fire(now))
    assert fired == sorted(set(fired))
    walls = [datetime.fromtimestamp(f / 1000, tz=timezone.utc).astimezone(ZoneInfo(tz)).replace(tzinfo=None)
             for f in fired]
    assert len(set(walls)) == len(walls)
    assert s.state is not None
    expected = CronSchedule(expr, tz).between(start, s.state.last_tick_ms, 1000)
    assert tuple(fired) == expected
