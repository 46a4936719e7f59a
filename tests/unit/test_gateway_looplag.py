"""The gateway's loop-lateness measure (services/gateway/looplag.py): the worst lateness within the window,
forgotten once the window has passed, and a real loop blocked by a handler is seen as behind."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, strategies as st

from spotreel.services.gateway.looplag import LoopLag


def test_the_worst_lateness_of_the_window_counts_and_then_is_forgotten() -> None:
    lag = LoopLag(window_s=5.0, clock=lambda: 0.0)
    assert lag.behind_s(now=0.0) == 0.0
    lag.record(0.01, now=1.0)
    lag.record(3.0, now=2.0)
    lag.record(0.02, now=3.0)
    assert lag.behind_s(now=3.0) == 3.0
    assert lag.behind_s(now=6.9) == 3.0
    assert lag.behind_s(now=7.1) == 0.02  # the 3 s tick left the window; the later one is still in it
    assert lag.behind_s(now=8.1) == 0.0


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 30)), max_size=60), st.floats(0, 200))
def test_behind_is_the_max_over_the_window(ticks: list[tuple[float, float]], at: float) -> None:
    lag, now = LoopLag(window_s=5.0), 0.0
    seen = []
    for gap, late in ticks:
        now += gap
        lag.record(late, now)
        seen.append((now, late))
    at = now + at
    expected = max((late for when, late in seen if when >= at - 5.0), default=0.0)
    assert lag.behind_s(now=at) == expected


def test_a_blocked_loop_is_seen_behind() -> None:
    async def run() -> tuple[float, float]:
        lag = LoopLag(tick_s=0.02, window_s=10.0)
        lag.start()
        await asyncio.sleep(0.1)
        before = lag.behind_s()
        time.sleep(0.4)  # a handler holding the loop
        await asyncio.sleep(0.05)
        after = lag.behind_s()
        await lag.aclose()
        return before, after

    before, after = asyncio.run(run())
    assert before < 0.2 and after >= 0.3, (before, after)
