"""Cron in an IANA time zone: DST gaps run once at the first instant after the gap, overlaps once at the
first occurrence; occurrences strictly increase and never repeat a local time (hypothesis)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.cron import CronError, CronSchedule, MissedPolicy, local_instant, validate_zone
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

MIN = 60_000
HOUR = 60 * MIN
NY = "America/New_York"


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def walk(schedule: CronSchedule, after: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        after = schedule.next_after(after)
        out.append(after)
    return out


def local(at: int, tz: str) -> datetime:
    return datetime.fromtimestamp(at / 1000, tz=timezone.utc).astimezone(ZoneInfo(tz))


def test_local_times_are_read_in_the_zone():
    # 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
    paris = CronSchedule("0 9 * * *", "Europe/Paris")
    assert paris.next_after(ms(2026, 1, 10)) == ms(2026, 1, 10, 8)
    assert paris.next_after(ms(2026, 7, 10)) == ms(2026, 7, 10, 7)


def test_a_time_in_the_spring_forward_gap_runs_once_at_the_end_of_the_gap():
    # New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC). 02:30 does not exist that day.
    daily = CronSchedule("30 2 * * *", NY)
    assert walk(daily, ms(2026, 3, 7), 3) == [ms(2026, 3, 7, 7, 30), ms(2026, 3, 8, 7), ms(2026, 3, 9, 6, 30)]
    # Every time the gap swallows, and 03:00 itself, are one occurrence at 03:00 EDT.
    twenty = CronSchedule("*/20 * * * *", NY)
    assert walk(twenty, ms(2026, 3, 8, 6, 30), 4) == [
        ms(2026, 3, 8, 6, 40),  # 01:40 EST
        ms(2026, 3, 8, 7),  # 02:00, 02:20, 02:40 (gap) and 03:00 EDT: once
        ms(2026, 3, 8, 7, 20),  # 03:20 EDT
        ms(2026, 3, 8, 7, 40),
    ]
    assert local(ms(2026, 3, 8, 7), NY).strftime("%H:%M %Z") == "03:00 EDT"


def test_a_time_in_the_fall_back_overlap_runs_once_at_its_first_occurrence():
    # New York, 2026-11-01: 02:00 EDT goes back to 01:00 EST (06:00 UTC); 01:00-01:59 happen twice.
    daily = CronSchedule("30 1 * * *", NY)
    assert walk(daily, ms(2026, 10, 31), 3) == [ms(2026, 10, 31, 5, 30), ms(2026, 11, 1, 5, 30), ms(2026, 11, 2, 6, 30)]
    half = CronSchedule("*/30 * * * *", NY)
    assert walk(half, ms(2026, 11, 1, 4, 40), 5) == [
        ms(2026, 11, 1, 5),  # 01:00 EDT
        ms(2026, 11, 1, 5, 30),  # 01:30 EDT; 01:00 and 01:30 EST (06:00, 06:30 UTC) name nothing new
        ms(2026, 11, 1, 7),  # 02:00 EST
        ms(2026, 11, 1, 7, 30),
        ms(2026, 11, 1, 8),
    ]
    # Asked from inside the repeated hour, the next is after it, and the latest is the first pass's.
    assert half.next_after(ms(2026, 11, 1, 6, 10)) == ms(2026, 11, 1, 7)
    assert half.latest_at_or_before(ms(2026, 11, 1, 6, 59)) == ms(2026, 11, 1, 5, 30)
    assert half.recent(ms(2026, 11, 1, 4), ms(2026, 11, 1, 7), 10) == (
        (ms(2026, 11, 1, 4, 30), ms(2026, 11, 1, 5), ms(2026, 11, 1, 5, 30), ms(2026, 11, 1, 7)), False)


def test_catch_up_across_a_gap_fires_each_occurrence_once():
    hourly = CronSchedule("0 * * * *", NY)
    tick = hourly.tick(ms(2026, 3, 8, 5, 30), ms(2026, 3, 8, 8, 30), MissedPolicy.RUN_ALL)
    # 01:00 EST, then 02:00 (gap) and 03:00 EDT as one, then 04:00 EDT.
    assert tick.fire == (ms(2026, 3, 8, 6), ms(2026, 3, 8, 7), ms(2026, 3, 8, 8))


def test_a_half_hour_gap_and_a_whole_skipped_day():
    # Lord Howe moves 30 minutes: 02:00 -> 02:30 local on 2026-10-04 (15:00 UTC the day before).
    lh = CronSchedule("15 2 * * *", "Australia/Lord_Howe")
    got = lh.next_after(ms(2026, 10, 3, 12))
    assert local(got, "Australia/Lord_Howe").strftime("%H:%M") == "02:30"
    # Samoa skipped 2011-12-30 entirely: a daily noon run that day happens at the first instant after it.
    apia = CronSchedule("0 12 * * *", "Pacific/Apia")
    runs = walk(apia, ms(2011, 12, 29), 3)
    assert [local(r, "Pacific/Apia").strftime("%m-%d %H:%M") for r in runs] == ["12-29 12:00", "12-31 00:00",
                                                                                 "12-31 12:00"]


def test_local_instant_of_existing_gap_and_overlap_times():
    z = ZoneInfo(NY)
    assert local_instant(datetime(2026, 6, 1, 12), z) == ms(2026, 6, 1, 16)
    assert local_instant(datetime(2026, 3, 8, 2, 59), z) == ms(2026, 3, 8, 7)
    assert local_instant(datetime(2026, 11, 1, 1, 15), z) == ms(2026, 11, 1, 5, 15)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "localtime", "../etc/passwd", "utc ", "EST5EDT\x00"])
def test_unknown_zones_are_refused(name):
    with pytest.raises(CronError, match="time zone"):
        validate_zone(name)
    with pytest.raises(CronError):
        CronSchedule("* * * * *", name)


ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran",
         "Europe/Moscow", "Pacific/Apia", "America/St_Johns", "UTC"]
EXPRS = ["* * * * *", "*/7 * * * *", "0 * * * *", "30 1,2,3 * * *", "15 2 * * *", "0 0 * * *", "59 23 * * *",
         "0,30 0-4 * * SUN", "45 1 1 * *"]
# Around DST changes: windows that start a day before some transition of the zones above.
STARTS = st.integers(min_value=ms(2010, 1, 1) // MIN, max_value=ms(2030, 1, 1) // MIN).map(lambda m: m * MIN)
TRANSITIONS = st.sampled_from([ms(2026, 3, 8, 6), ms(2026, 11, 1, 5), ms(2026, 3, 29, 0), ms(2026, 10, 25, 0),
                               ms(2026, 4, 4, 14), ms(2026, 10, 3, 14), ms(2011, 12, 29, 9), ms(2011, 3, 27, 0),
                               ms(2026, 4, 4, 2), ms(2026, 9, 6, 3)])


@settings(max_examples=examples(200), deadline=None)
@given(tz=st.sampled_from(ZONES), expr=st.sampled_from(EXPRS),
       start=st.one_of(STARTS, TRANSITIONS.flatmap(lambda t: st.integers(t - 30 * HOUR, t + 6 * HOUR))))
def test_occurrences_strictly_increase_and_never_repeat_a_local_time(tz, expr, start):
    schedule = CronSchedule(expr, tz)
    runs = walk(schedule, start, 40)
    assert all(a < b for a, b in zip(runs, runs[1:]))
    walls = [local(r, tz).replace(tzinfo=None) for r in runs]
    assert len(set(walls)) == len(walls)
    # Walking back from the last gives the same occurrences, and next_after agrees with latest_at_or_before.
    back, more = schedule.recent(start, runs[-1], 40)
    assert list(back) == runs and not more
    for r in runs:
        assert schedule.latest_at_or_before(r) == r
        assert schedule.next_after(r - 1) == r


@settings(max_examples=examples(200), deadline=None)
@given(tz=st.sampled_from(ZONES), minute=st.integers(0, 59), hour=st.integers(0, 23),
       around=TRANSITIONS.map(lambda t: t - 36 * HOUR))
def test_a_daily_time_is_the_instant_of_that_wall_clock_time_on_each_day(tz, minute, hour, around):
    """The walk agrees with the definition: day by day, local_instant of the named wall-clock time."""
    z = ZoneInfo(tz)
    first = local(around, tz).date() + timedelta(days=1)
    expected = []
    for d in range(4):
        day = first + timedelta(days=d)
        at = local_instant(datetime(day.year, day.month, day.day, hour, minute), z)
        if not expected or at > expected[-1]:
            expected.append(at)
    schedule = CronSchedule(f"{minute} {hour} * * *", tz)
    start = local_instant(datetime(first.year, first.month, first.day), z) - 1
    got = [r for r in walk(schedule, start, 5) if r <= expected[-1]]
    assert got == expected
