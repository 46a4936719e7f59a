"""Cron: validation, next occurrence, missed-occurrence policies, occurrence ids."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.cron import (
    OCCURRENCE_NAMESPACE,
    CronError,
    CronSchedule,
    CronTick,
    MissedPolicy,
    occurrence_id,
    validate,
)
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


T0 = ms(2024, 1, 1, 12, 0)  # a Monday


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("* * * *", "has 4 fields; expected 5"),
        ("* * * * * *", "has 6 fields"),
        ("60 * * * *", "minute value 60 is outside 0-59"),
        ("* 24 * * *", "hour value 24 is outside 0-23"),
        ("* * * * 8", "day-of-week value 8 is outside 0-7"),
        ("* * 0 * *", "day-of-month value 0 is outside 1-31"),
        ("* * * 13 *", "month value 13 is outside 1-12"),
        ("*/0 * * * *", "step in '\\*/0' must be at least 1"),
        ("5-3 * * * *", "range '5-3' runs backwards"),
        ("* * * * FRI-MON", "runs backwards"),
        ("a b c d e", "minute value 'A' is not a number or name"),
        ("* JAN * * *", "hour value 'JAN' is not a number or name"),
        ("1,,2 * * * *", "is not of the form"),
        ("* ? * * *", "is not of the form"),
        ("0 0 1,L * *", "not a number or name"),
        ("0 0 L * MON", "needs the other day field to be"),
        ("0 0 1 * 5#2", "needs the other day field to be"),
        ("0 0 * * 5#6", "is not of the form"),
        ("H * * * *", "hashed/random"),
        ("R * * * *", "hashed/random"),
        ("0 H(0-5) * * *", "hashed/random"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("@reboot", "unknown cron macro"),
        ("@every5m", "unknown cron macro"),
    ],
)
def test_invalid_expressions_are_rejected_clearly(expr, fragment):
    with pytest.raises(CronError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        validate(expr)


def test_cron_error_is_a_value_error_and_non_strings_are_rejected():
    with pytest.raises(ValueError):
        validate(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expr, normal",
    [
        ("  */15   9-17 * *   MON-FRI ", "*/15 9-17 * * MON-FRI"),
        ("@Hourly", "@hourly"),
        ("0 0 29 2 *", "0 0 29 2 *"),
        ("0 12 * * THU", "0 12 * * THU"),
        ("0 0 1 MAR,APR *", "0 0 1 MAR,APR *"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 0 ? * 5#2", "0 0 ? * 5#2"),
    ],
)
def test_valid_expressions_normalize(expr, normal):
    assert validate(expr) == normal
    assert CronSchedule(expr).expr == normal


@pytest.mark.parametrize(
    "expr, first_three",
    [
        # croniter 5.0.1 reads a one-value range as '*': these must not fire every minute.
        ("0 3-3 * * *", [ms(2024, 1, 2, 3), ms(2024, 1, 3, 3), ms(2024, 1, 4, 3)]),
        ("0 3-3/2 * * *", [ms(2024, 1, 2, 3), ms(2024, 1, 3, 3), ms(2024, 1, 4, 3)]),
        ("0 0 * JAN-JAN MON-MON", [ms(2024, 1, 8), ms(2024, 1, 15), ms(2024, 1, 22)]),
        ("0 22/1 * * *", [ms(2024, 1, 1, 22), ms(2024, 1, 1, 23), ms(2024, 1, 2, 22)]),
        ("0 0 * * 5-7", [ms(2024, 1, 5), ms(2024, 1, 6), ms(2024, 1, 7)]),
        ("0 0 1-31 * MON", [ms(2024, 1, 8), ms(2024, 1, 15), ms(2024, 1, 22)]),
        ("0 0 L * ?", [ms(2024, 1, 31), ms(2024, 2, 29), ms(2024, 3, 31)]),
        ("0 0 ? * fri#2", [ms(2024, 1, 12), ms(2024, 2, 9), ms(2024, 3, 8)]),
        ("0 0 * * 7#1", [ms(2024, 1, 7), ms(2024, 2, 4), ms(2024, 3, 3)]),
    ],
)
def test_occurrences_of_tricky_fields(expr, first_three):
    schedule = CronSchedule(expr)
    got, at = [], T0
    for _ in range(3):
        at = schedule.next_after(at)
        got.append(at)
    assert got == first_three


def test_next_after_is_strict_and_ignores_sub_second_offsets():
    every_min = CronSchedule("* * * * *")
    assert every_min.next_after(T0) == T0 + MIN
    assert every_min.next_after(T0 - 1) == T0
    assert every_min.next_after(T0 + 999) == T0 + MIN
    assert every_min.next_after(T0 + MIN - 1) == T0 + MIN
    assert CronSchedule("@daily").next_after(T0) == ms(2024, 1, 2)
    assert CronSchedule("0 0 29 2 *").next_after(T0) == ms(2024, 2, 29)
    # Day-of-month OR day-of-week when both are restricted (classic cron).
    assert CronSchedule("0 0 15 * FRI").next_after(T0) == ms(2024, 1, 5)


def test_latest_at_or_before_is_inclusive():
    hourly = CronSchedule("0 * * * *")
    assert hourly.latest_at_or_before(T0) == T0
    assert hourly.latest_at_or_before(T0 - 1) == T0 - HOUR
    assert hourly.latest_at_or_before(T0 + 59 * MIN) == T0


def test_recent_window_and_truncation():
    hourly = CronSchedule("0 * * * *")
    assert hourly.recent(T0, T0 + 3 * HOUR, 10) == ((T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR), False)
    assert hourly.recent(T0 - 1, T0 + 3 * HOUR, 2) == ((T0 + 2 * HOUR, T0 + 3 * HOUR), True)
    assert hourly.recent(T0, T0 + 3 * HOUR, 3) == ((T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR), False)
    assert hourly.recent(T0, T0, 5) == ((), False)
    assert hourly.recent(T0 + 5, T0 + 10, 5) == ((), False)
    with pytest.raises(ValueError, match="limit"):
        hourly.recent(T0, T0 + HOUR, 0)


def test_on_time_tick_fires_under_every_policy():
    hourly = CronSchedule("0 * * * *")
    for policy in MissedPolicy:
        assert hourly.tick(T0 - 1, T0 + 30, policy) == CronTick((T0,), T0 + HOUR, False)


def test_nothing_due_fires_nothing():
    hourly = CronSchedule("0 * * * *")
    for policy in ("skip", "run_once", "run_all"):
        assert hourly.tick(T0, T0 + 30 * MIN, policy) == CronTick((), T0 + HOUR, False)
    # A window that is empty or reversed is simply empty.
    assert hourly.tick(T0 + 10, T0, "run_all") == CronTick((), T0 + HOUR, False)


def test_gap_under_each_missed_policy():
    # The scheduler was down from 12:00 until 17:20; 13:00..17:00 were due (5 occurrences).
    hourly = CronSchedule("0 * * * *")
    now = T0 + 5 * HOUR + 20 * MIN
    due = tuple(T0 + h * HOUR for h in range(1, 6))
    assert hourly.tick(T0, now, MissedPolicy.SKIP) == CronTick((), T0 + 6 * HOUR, True)
    assert hourly.tick(T0, now, MissedPolicy.SKIP, grace_ms=30 * MIN) == CronTick((due[-1],), T0 + 6 * HOUR, True)
    assert hourly.tick(T0, now, MissedPolicy.RUN_ONCE) == CronTick((due[-1],), T0 + 6 * HOUR, True)
    assert hourly.tick(T0, now, MissedPolicy.RUN_ALL) == CronTick(due, T0 + 6 * HOUR, False)
    assert hourly.tick(T0, now, MissedPolicy.RUN_ALL, max_catch_up=2) == CronTick(due[-2:], T0 + 6 * HOUR, True)


def test_late_single_occurrence_under_skip_and_grace_boundary():
    hourly = CronSchedule("0 * * * *")
    assert hourly.tick(T0 - 1, T0 + MIN, "skip", grace_ms=MIN).fire == (T0,)
    assert hourly.tick(T0 - 1, T0 + MIN + 1, "skip", grace_ms=MIN) == CronTick((), T0 + HOUR, True)


def test_run_all_flood_is_capped_cheaply():
    # A year of every-minute occurrences; only the latest 100 are produced.
    every_min = CronSchedule("* * * * *")
    tick = every_min.tick(T0, T0 + 365 * DAY, "run_all", max_catch_up=100)
    assert len(tick.fire) == 100 and tick.dropped
    assert tick.fire[-1] == T0 + 365 * DAY and tick.fire[0] == T0 + 365 * DAY - 99 * MIN


def test_tick_argument_validation():
    hourly = CronSchedule("0 * * * *")
    with pytest.raises(ValueError):
        hourly.tick(T0, T0 + HOUR, "sometimes")
    with pytest.raises(ValueError, match="grace_ms"):
        hourly.tick(T0, T0 + HOUR, "skip", grace_ms=-1)
    with pytest.raises(ValueError, match="max_catch_up"):
        hourly.tick(T0, T0 + HOUR, "run_all", max_catch_up=0)


def test_occurrence_id_is_a_documented_uuid5():
    assert OCCURRENCE_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "https://spotreel.invalid/ns/cron-occurrence")
    one = occurrence_id("sched-1", T0)
    assert one == str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"sched-1@{T0}"))
    assert one == occurrence_id("sched-1", T0)
    assert uuid.UUID(one).version == 5
    assert len({one, occurrence_id("sched-1", T0 + MIN), occurrence_id("sched-2", T0)}) == 3


# -- properties ---------------------------------------------------------------------------------------------

RANGES = {"minute": (0, 59), "hour": (0, 23), "dom": (1, 31), "month": (1, 12), "dow": (0, 6)}


@st.composite
def field(draw, name):
    """A field's text and the exact set of values it allows."""
    lo, hi = RANGES[name]
    kind = draw(st.sampled_from(["star", "list", "range", "step", "range_step"]))
    if kind == "star":
        return "*", set(range(lo, hi + 1))
    if kind == "list":
        values = sorted(draw(st.sets(st.integers(lo, hi), min_size=1, max_size=4)))
        return ",".join(map(str, values)), set(values)
    if kind == "range":
        a = draw(st.integers(lo, hi))
        b = draw(st.integers(a, hi))
        return f"{a}-{b}", set(range(a, b + 1))
    step = draw(st.integers(1, hi - lo + 1))
    if kind == "step":
        return f"*/{step}", set(range(lo, hi + 1, step))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    return f"{a}-{b}/{step}", set(range(a, b + 1, step))


@st.composite
def expressions(draw):
    parts = {name: draw(field(name)) for name in RANGES}
    return " ".join(parts[n][0] for n in RANGES), parts


def brute_force(parts, after_ms, until_ms):
    """Every minute in (after, until] that the fields allow, checked one minute at a time."""
    restricted = len(parts["dom"][1]) < 31 and len(parts["dow"][1]) < 7
    out = []
    minute = after_ms // MIN * MIN + MIN
    while minute <= until_ms:
        t = datetime.fromtimestamp(minute / 1000, tz=timezone.utc)
        dom_ok = t.day in parts["dom"][1]
        dow_ok = (t.isoweekday() % 7) in parts["dow"][1]
        day_ok = (dom_ok or dow_ok) if restricted else (dom_ok and dow_ok)
        time_ok = t.minute in parts["minute"][1] and t.hour in parts["hour"][1]
        if time_ok and t.month in parts["month"][1] and day_ok:
            out.append(minute)
        minute += MIN
    return out


windows = dict(
    start=st.integers(ms(2023, 1, 1), ms(2026, 1, 1)),
    length=st.integers(0, 3 * DAY),
)


@settings(max_examples=examples(300), deadline=None)
@given(expr=expressions(), **windows)
def test_occurrences_match_a_minute_by_minute_brute_force(expr, start, length):
    text, parts = expr
    try:
        schedule = CronSchedule(text)
    except CronError as err:
        assert "never fires" in str(err)
        return
    expected = brute_force(parts, start, start + length)
    got, truncated = schedule.recent(start, start + length, 10_000)
    assert list(got) == expected and not truncated
    if expected:
        assert schedule.next_after(start) == expected[0]
        assert schedule.latest_at_or_before(start + length) == expected[-1]


@settings(max_examples=examples(1_000), deadline=None)
@given(
    expr=st.sampled_from(
        ["* * * * *", "*/7 * * * *", "0 */3 * * *", "15 9-17 * * MON-FRI", "0 0 1,15 * *", "@hourly"]
    ),
    policy=st.sampled_from(list(MissedPolicy)),
    cap=st.integers(1, 20),
    grace=st.integers(0, HOUR),
    **windows,
)
def test_ticks_fire_in_order_inside_the_window_and_within_the_cap(expr, policy, cap, grace, start, length):
    schedule = CronSchedule(expr)
    now = start + length
    tick = schedule.tick(start, now, policy, grace_ms=grace, max_catch_up=cap)
    assert all(a < b for a, b in zip(tick.fire, tick.fire[1:]))
    assert all(start < t <= now for t in tick.fire)
    assert tick.next_ms > now and tick.next_ms == schedule.next_after(now)
    if policy is MissedPolicy.RUN_ALL:
        assert len(tick.fire) <= cap
    else:
        assert len(tick.fire) <= 1
    if tick.fire:
        # Whatever fires is the latest part of the window: nothing due after it was left out.
        assert schedule.next_after(tick.fire[-1]) > now
