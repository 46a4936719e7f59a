"""The fleet simulator's changing preemption rate and its adaptive workers: per-stage MTBF, the interval a
simulated worker takes from the lease answer's pool losses, and the per-stage interval figures."""

from __future__ import annotations

import random

import pytest

from spotreel.fleetsim.config import SimConfig, parse_mtbf
from spotreel.fleetsim.figures import Attempt, interval_by_stage
from spotreel.fleetsim.fleet import Shared

pytestmark = pytest.mark.unit


def test_mtbf_per_stage_is_parsed_and_checked() -> None:
    assert parse_mtbf("600") == (600.0, ())
    assert parse_mtbf("600, 60") == (600.0, (600.0, 60.0))
    with pytest.raises(ValueError, match="--mtbf"):
        parse_mtbf("soon")
    cfg = SimConfig(workers=(10, 10), mtbf_s=600.0, mtbf_by_stage_s=(600.0, 60.0))
    assert [cfg.stage_mtbf_s(i) for i in range(2)] == [600.0, 60.0]
    assert cfg.prior_mtbf_s == 600.0 and SimConfig(mtbf_prior_s=900.0).prior_mtbf_s == 900.0
    with pytest.raises(ValueError, match="one per stage"):
        SimConfig(workers=(10, 10, 10), mtbf_by_stage_s=(600.0, 60.0))


def _shared(**cfg) -> Shared:
    return Shared(cfg=SimConfig(**cfg), base_url="", worker_key="", tenant_keys={}, model="m", gpu_type="g",
                  session=None, rng=random.Random(1))  # type: ignore[arg-type]


def test_an_adaptive_simulated_worker_follows_the_pools_losses() -> None:
    sh = _shared(policy="adaptive", checkpoint_cost_s=0.5, mtbf_s=600.0, interval_bounds_s=(1.0, 600.0))
    assert sh.interval_s() == pytest.approx((2 * 0.5 * 600) ** 0.5)  # nothing measured: the prior
    calm = {"pool_lease_losses_1h": 1, "pool_leased_seconds_1h": 1200.0}
    storm = {"pool_lease_losses_1h": 40, "pool_leased_seconds_1h": 1200.0}
    assert sh.mtbf_estimate_s(calm) == pytest.approx(900.0)
    assert sh.mtbf_estimate_s(storm) == pytest.approx(1800.0 / 41)
    assert sh.interval_s(storm) < sh.interval_s() < sh.interval_s(calm)
    fixed = _shared(policy="fixed", fixed_interval_s=3.0)
    assert fixed.interval_s(storm) == 3.0


def test_interval_figures_are_grouped_by_the_stage_the_lease_began_in() -> None:
    stages = [{"from_ms": 0, "to_ms": 1000}, {"from_ms": 1000, "to_ms": 2000}]
    attempts = [
        Attempt("a", 1, "w1", 0, 5, 5, 0.0, 1.0, 2, "completed", (), 100, 17.0, 600.0),
        Attempt("b", 1, "w2", 0, 5, 3, 0.0, 0.5, 1, "vanished", (), 900, 15.0, 450.0),
        Attempt("c", 1, "w3", 0, 5, 5, 0.0, 2.0, 4, "notice", (), 1500, 6.0, 40.0),
    ]
    first, second = interval_by_stage(attempts, stages)
    assert (first["leases"], first["lost_leases"], first["checkpoints"]) == (2, 1, 3)
    assert first["interval_min_s"] == 15.0 and first["interval_max_s"] == 17.0
    assert (second["leases"], second["lost_leases"], second["mtbf_estimate_p50_s"], second["interval_p50_s"]) == (
        1, 1, 40.0, 6.0)
