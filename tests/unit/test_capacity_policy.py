"""The capacity rules: bounds, cooldowns, and never draining a worker that holds a lease."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import events as ev
from spotreel.services.capacity.policy import (CapacityConfig, Decision, FleetView, PoolView, decide, demand,
                                               preemption_spares)
from spotreel.services.capacity.stats import sum_pool
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

CFG = CapacityConfig(floor=1, ceiling=10, idle_buffer=1, target_wait_s=60, up_cooldown_s=5, down_cooldown_s=30)


def ids(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


def test_an_empty_pool_keeps_the_floor_plus_nothing_more():
    assert demand(PoolView("p"), CFG) == 1  # idle buffer 1, floor 1
    assert demand(PoolView("p"), CapacityConfig(floor=0, idle_buffer=0)) == 0


def test_queue_is_served_within_the_target_wait_by_measured_run_time():
    # 60 s target, 20 s per job: one worker takes 3 queued jobs in the window.
    view = PoolView("p", queued=7, leased=2, mean_run_ms=20_000)
    assert demand(view, CFG) == 2 + 3 + 1
    # nothing measured yet: one worker per queued job (bounded by the ceiling)
    assert demand(PoolView("p", queued=7, leased=2), CFG) == 10


def test_preemption_spares_cover_the_losses_expected_during_one_cold_start():
    cfg = CapacityConfig(floor=0, ceiling=100, idle_buffer=0, cold_start_s=120)
    # 30 busy, a lease lost every 2 h of leased time: 30 * 0.5/h * (120 s / 3600) = 0.5 -> one spare
    assert preemption_spares(PoolView("p", leased=30, loss_rate_per_hour=0.5), cfg) == 1
    assert demand(PoolView("p", leased=30, loss_rate_per_hour=0.5), cfg) == 31
    # under half a loss expected: no idle worker for it
    assert preemption_spares(PoolView("p", leased=20, loss_rate_per_hour=0.5), cfg) == 0
    # a spot market in trouble: 40 busy, 6 losses per leased hour, 2 min boots -> 8 spares
    assert preemption_spares(PoolView("p", leased=40, loss_rate_per_hour=6.0), cfg) == 8
    assert preemption_spares(PoolView("p", leased=0, loss_rate_per_hour=6.0), cfg) == 0


def test_pool_totals_weigh_run_time_and_loss_rate_by_leases():
    def rec(partition, leased, run_ms, rate, queued=0):
        return ev.PoolStats(pool="p", partition=partition, at_ms=1, queued=queued, leased=leased, oldest_wait_ms=0,
                            mean_run_ms=run_ms, lease_loss_rate_per_hour=rate)

    other = ev.PoolStats(pool="q", partition=0, at_ms=1, queued=50, leased=9, oldest_wait_ms=0)
    view = sum_pool("p", [rec(0, 3, 10_000, 2.0, queued=4), rec(1, 1, 30_000, 0.0), rec(2, 0, 0.0, 0.0),
                          rec(3, 0, 0.0, 4.0), other])
    assert (view.queued, view.leased) == (4, 4)
    assert view.mean_run_ms == pytest.approx((3 * 10_000 + 30_000) / 4)
    assert view.loss_rate_per_hour == pytest.approx((3 * 2.0 + 0.0 + 4.0) / 5)  # idle partition 2 has no say
    assert sum_pool("p", [other]) == PoolView("p")


def test_scale_up_is_stepped_and_cooled_down():
    cfg = CapacityConfig(ceiling=50, max_step_up=4, up_cooldown_s=10)
    view = PoolView("p", queued=30)
    d = decide(view, FleetView(), cfg, now_s=100, last_up_s=None, last_down_s=None)
    assert d.add == 4 and d.want == 31
    assert decide(view, FleetView(), cfg, now_s=105, last_up_s=100, last_down_s=None).add == 0
    assert decide(view, FleetView(), cfg, now_s=110, last_up_s=100, last_down_s=None).add == 4


def test_starting_workers_count_as_supply():
    view = PoolView("p", queued=3)
    d = decide(view, FleetView(starting=ids("s", 4)), CFG, now_s=100, last_up_s=None, last_down_s=None)
    assert d == Decision(want=4)


def test_scale_down_drains_only_idle_workers_newest_first():
    fleet = FleetView(idle=ids("i", 3), busy=ids("b", 4))
    view = PoolView("p", leased=4)
    d = decide(view, fleet, CFG, now_s=100, last_up_s=None, last_down_s=None)
    assert d.drain == ("i2", "i1") and d.want == 5
    busy_only = FleetView(busy=ids("b", 6))
    assert decide(PoolView("p", leased=2), busy_only, CFG, 100, None, None).drain == ()


def test_idle_workers_the_queue_is_about_to_take_are_not_drained():
    # 8 idle, 3 queued and a long target wait: demand is small, but 3 of the idle are about to get a lease.
    cfg = CapacityConfig(floor=0, ceiling=20, idle_buffer=1, target_wait_s=600, down_cooldown_s=0)
    view = PoolView("p", queued=3, mean_run_ms=10_000)
    d = decide(view, FleetView(idle=ids("i", 8)), cfg, now_s=100, last_up_s=None, last_down_s=None)
    assert d.want == 2 and d.drain == ("i7", "i6", "i5", "i4", "i3")
    d = decide(PoolView("p", queued=8, mean_run_ms=10_000), FleetView(idle=ids("i", 8)), cfg, 100, None, None)
    assert d.drain == () and "busy or about to be" in d.reason


def test_scale_down_waits_for_the_cooldown_after_any_action():
    fleet = FleetView(idle=ids("i", 5))
    view = PoolView("p")
    assert decide(view, fleet, CFG, now_s=100, last_up_s=80, last_down_s=None).drain == ()
    assert decide(view, fleet, CFG, now_s=111, last_up_s=80, last_down_s=None).drain == ("i4", "i3", "i2", "i1")


@pytest.mark.parametrize("bad", [dict(floor=3, ceiling=2), dict(floor=-1), dict(idle_buffer=-1),
                                 dict(max_step_up=0), dict(target_wait_s=0), dict(up_cooldown_s=-1)])
def test_bad_configuration_is_refused(bad):
    with pytest.raises(ValueError):
        CapacityConfig(**bad)


views = st.builds(PoolView, pool=st.just("p"), queued=st.integers(0, 500), leased=st.integers(0, 60),
                  mean_run_ms=st.sampled_from([0.0, 1_000.0, 30_000.0, 600_000.0]),
                  loss_rate_per_hour=st.sampled_from([0.0, 0.5, 6.0, 120.0]))
fleets = st.builds(lambda i, b, s, d: FleetView(ids("i", i), ids("b", b), ids("s", s), ids("d", d)),
                   st.integers(0, 30), st.integers(0, 60), st.integers(0, 10), st.integers(0, 5))
configs = st.builds(lambda f, extra, buf, step, cold: CapacityConfig(floor=f, ceiling=f + extra, idle_buffer=buf,
                                                                      max_step_up=step, cold_start_s=cold),
                    st.integers(0, 5), st.integers(0, 40), st.integers(0, 3), st.integers(1, 10),
                    st.sampled_from([0.0, 30.0, 300.0]))
times = st.one_of(st.none(), st.floats(0, 200))


@settings(max_examples=examples(400), deadline=None)
@given(views, fleets, configs, st.floats(100, 300), times, times)
def test_decisions_stay_in_bounds(view, fleet, cfg, now, last_up, last_down):
    d = decide(view, fleet, cfg, now, last_up, last_down)
    assert cfg.floor <= d.want <= cfg.ceiling
    assert not (d.add and d.drain)
    assert 0 <= d.add <= cfg.max_step_up
    assert fleet.supply + d.add <= max(cfg.ceiling, fleet.supply)
    assert set(d.drain) <= set(fleet.idle), "only idle workers are drained"
    assert len(d.drain) <= max(0, len(fleet.idle) - view.queued), "not the idle ones queued jobs are about to take"
    assert fleet.supply - len(d.drain) >= min(cfg.floor, fleet.supply)
    if d.add:
        assert last_up is None or now - last_up >= cfg.up_cooldown_s
    if d.drain:
        recent = [t for t in (last_up, last_down) if t is not None]
        assert not recent or now - max(recent) >= cfg.down_cooldown_s


@settings(max_examples=examples(200), deadline=None)
@given(views, configs, st.floats(0, 500))
def test_more_preemptions_never_ask_for_fewer_workers(view, cfg, more):
    from dataclasses import replace

    worse = replace(view, loss_rate_per_hour=view.loss_rate_per_hour + more)
    assert demand(view, cfg) <= demand(worse, cfg) <= cfg.ceiling
