"""Queue position and estimated wait, for the 202 answer and for admission control.

The estimate is a fluid one: a pool of W busy workers, each taking G ms per job, finishes W/G jobs per ms,
so the job with k jobs ahead starts after about (k + 1) * G / W ms. Idle workers take the first jobs at once.
It is deliberately simple and monotone (more jobs ahead never shortens it, more workers never lengthen
it); the gateway passes G as a measured mean or percentile (``percentile`` below) per pool.

With no active worker there is no honest number: ``wait_ms`` is None, unless the caller knows the
cold-start delay of a new worker, in which case the estimate is that delay plus the one-worker estimate
(the first worker comes up and serves the queue alone).

An idle worker whose loaded model is another one (``cold_idle_workers``) takes a job only after a model
switch (unload, load: ``switch_ms``): the warm idle workers take the first jobs at once, the cold ones the
next ones after the switch, and no job behind those waits less than the switch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Eta:
    queue_position: int
    wait_ms: int | None

    @property
    def wait_seconds(self) -> int | None:
        return None if self.wait_ms is None else -(-self.wait_ms // 1000)


def estimate(
    jobs_ahead: int,
    active_workers: int,
    gen_time_ms: int,
    idle_workers: int = 0,
    cold_start_ms: int | None = None,
    cold_idle_workers: int = 0,
    switch_ms: int = 0,
) -> Eta:
    """``jobs_ahead`` counts jobs that will start before this one (0: next); ``queue_position`` is 1-based.
    ``cold_idle_workers``: how many of the idle workers must switch models first, ``switch_ms`` each."""
    if jobs_ahead < 0 or active_workers < 0 or gen_time_ms < 0:
        raise ValueError("jobs_ahead, active_workers and gen_time_ms must be >= 0")
    if not 0 <= idle_workers <= active_workers:
        raise ValueError(f"idle_workers must be between 0 and active_workers, got {idle_workers}")
    if cold_start_ms is not None and cold_start_ms < 0:
        raise ValueError(f"cold_start_ms must be >= 0, got {cold_start_ms}")
    if not 0 <= cold_idle_workers <= idle_workers or switch_ms < 0:
        raise ValueError(f"cold_idle_workers must be between 0 and idle_workers and switch_ms >= 0, got "
                         f"{cold_idle_workers}, {switch_ms}")
    position = jobs_ahead + 1
    if active_workers == 0:
        if cold_start_ms is None:
            return Eta(position, None)
        return Eta(position, cold_start_ms + position * gen_time_ms)
    switching = switch_ms if cold_idle_workers else 0
    if jobs_ahead < idle_workers:
        return Eta(position, 0 if jobs_ahead < idle_workers - cold_idle_workers else switching)
    served_before = jobs_ahead - idle_workers + 1
    return Eta(position, max(switching, -(-served_before * gen_time_ms // active_workers)))


def fair_jobs_ahead(own_ahead: int, own_weight: float, others: Iterable[tuple[int, float]]) -> int:
    """Jobs ahead of a new job under fair share rather than FIFO, ignoring differences in current usage.

    ``own_ahead`` is the tenant's own queued work at the new job's tier or above (strict tiers put all of it
    first); ``others`` is (queued jobs, weight) for each other tenant in the pool. While the tenant drains
    own_ahead + 1 jobs, another tenant of weight w gets about (own_ahead + 1) * w / own_weight of them, at
    most what it has queued.
    """
    if own_ahead < 0 or not own_weight > 0:
        raise ValueError("own_ahead must be >= 0 and own_weight > 0")
    turns = own_ahead + 1
    return own_ahead + sum(min(count, math.ceil(turns * weight / own_weight)) for count, weight in others)


def percentile(samples: Sequence[int], q: float) -> int | None:
    """Nearest-rank percentile (q in (0, 100]) of measured generation times; None without samples."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile q must be in (0, 100], got {q}")
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
