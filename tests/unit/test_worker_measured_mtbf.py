"""The pool's measured lease-loss rate reaches the worker's checkpoint interval: pool-stats records summed
per pool (dispatch/order.py), the lease answer's fields, and the runtime moving its policy's MTBF."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spotreel.dispatch.order import PoolQueues
from spotreel.worker.runtime import RuntimeOptions, WorkerRuntime
from spotreel.worker.signals import PreemptionNotice
from spotreel.worker.transport import WorkerLease

pytestmark = pytest.mark.unit


def _stats(pool: str, partition: int, lost: int, leased_s: float, rate: float | None = None, at_ms: int = 0):
    rate = lost / (leased_s / 3600) if rate is None and leased_s else (rate or 0.0)
    return SimpleNamespace(pool=pool, partition=partition, queued=0, min_share=None, lease_losses_1h=lost,
                           lease_loss_rate_per_hour=rate, leased_seconds_1h=leased_s, at_ms=at_ms)


def test_losses_and_leased_time_are_summed_over_partitions_per_pool() -> None:
    q = PoolQueues()
    assert q.lease_losses("wan@h100") == (0, 0.0)
    q.record(_stats("wan@h100", 0, 2, 1800.0))
    q.record(_stats("wan@h100", 1, 1, 900.0))
    q.record(_stats("ltx@h100", 0, 9, 60.0))
    assert q.lease_losses("wan@h100") == (3, 2700.0)
    q.record(_stats("wan@h100", 0, 0, 3600.0))  # a partition's newer record replaces its older one
    assert q.lease_losses("wan@h100") == (1, 4500.0)


def test_a_record_without_the_leased_time_gives_it_back_from_the_rate() -> None:
    q = PoolQueues()
    old = SimpleNamespace(pool="p@g", partition=0, queued=0, lease_losses_1h=2, lease_loss_rate_per_hour=4.0)
    q.record(old)  # an older scheduler: no leased_seconds_1h, no min_share
    assert q.lease_losses("p@g") == (2, pytest.approx(1800.0))


def _lease(losses: int | None, leased_s: float | None) -> WorkerLease:
    answer = {"job_id": "j", "epoch": 1, "worker_id": "w", "attempt": 1, "lease_ttl_ms": 30_000,
              "lease_expires_at_ms": 1, "pool": "p@g", "model": "p", "gpu_type": "g", "prompt": "x",
              "duration_s": 1.0, "resolution": "64x64", "fps": 8, "seed": 1, "num_steps": 10,
              "pool_lease_losses_1h": losses, "pool_leased_seconds_1h": leased_s}
    return WorkerLease.from_answer(answer)


def _runtime(**options) -> WorkerRuntime:
    return WorkerRuntime(None, None, None, None, None, PreemptionNotice(1.0), RuntimeOptions(**options),
                         report=lambda *a, **k: None)


def test_each_lease_moves_the_mtbf_from_the_prior_to_the_pools_measurement() -> None:
    rt = _runtime(mtbf_s=3600.0, checkpoint_min_s=1.0, checkpoint_max_s=10_000.0)
    rt.policy.record_cost(2.0)
    assert rt._observe_pool(_lease(None, None)) == 3600.0  # a gateway that does not say: the prior
    assert rt.policy.interval_s == pytest.approx(120.0)
    assert rt._observe_pool(_lease(35, 3600.0)) == pytest.approx(200.0)  # a stormy hour
    assert rt.policy.interval_s == pytest.approx((2 * 2.0 * 200.0) ** 0.5)
    assert rt._observe_pool(_lease(0, 7200.0)) == pytest.approx(10_800.0)  # a quiet one: above the prior
    assert rt._observe_pool(_lease(-1, 5.0)) == pytest.approx(10_800.0)  # nonsense is ignored


def test_the_prior_weight_sets_how_fast_measurements_win() -> None:
    light = _runtime(mtbf_s=3600.0, mtbf_prior_losses=0.1)
    heavy = _runtime(mtbf_s=3600.0, mtbf_prior_losses=100.0)
    lease = _lease(12, 3600.0)  # the pool measured an MTBF of 300 s
    assert abs(light._observe_pool(lease) - 300.0) < abs(heavy._observe_pool(lease) - 300.0)


def test_a_fixed_interval_stays_fixed() -> None:
    rt = _runtime(checkpoint_every_s=30.0)
    rt._observe_pool(_lease(100, 60.0))
    assert rt.policy.interval_s == 30.0
