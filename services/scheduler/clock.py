"""The scheduler's two clocks: its own wall clock (timers, stats, ledgers, eviction) and the broker's append
time of a record (what judges a lease deadline: a worker's clock never does). Callers read
`clock.now_ms()` through the module so a bench can stand in for the wall clock in one place
(bench/retention_bench.py)."""

from __future__ import annotations

import time
from typing import Any


def now_ms() -> int:
    return int(time.time() * 1000)


def appended_ms(msg: Any) -> int | None:
    """The broker's append time of a record (ms), or None when the topic stamps records with the producer's
    clock (CreateTime: a worker's clock must never judge its own lease)."""
    if getattr(msg, "timestamp_type", 0) != 1 or not msg.timestamp:
        return None
    return int(round(msg.timestamp * 1000))
