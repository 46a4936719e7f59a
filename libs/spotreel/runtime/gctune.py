"""The cyclic garbage collector of the long-running processes, set once at start (settings.gc_threshold).

Python's defaults (a young collection every 700 allocations, a full one after ten middle ones) suit a
short script. A gateway holds thousands of long polls open for up to 20 s each: their requests, tasks and
futures outlive two young collections, reach the oldest generation and make full collections frequent, each
walking everything the process holds, which a profile of a gateway under a fleet's load shows as a large
share of its CPU (docs/decisions/0010-collector-thresholds.md). `install` moves what start-up built (modules, schemas, the app) out of the collector's
sight (gc.freeze) and collects less often; reference counting still frees nearly everything at once, the
collector is only for cycles. An empty setting keeps Python's defaults (the baseline of that comparison)."""

from __future__ import annotations

import gc


def parse(setting: str) -> tuple[int, int, int] | None:
    """"7000,20,100" -> (7000, 20, 100); "" -> None (Python's defaults)."""
    if not setting.strip():
        return None
    parts = [p.strip() for p in setting.split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or any(v < 1 for v in values):
        raise ValueError(f"SPOTREEL_GC_THRESHOLD must be three positive integers like 7000,20,100, got {setting!r}")
    return values  # type: ignore[return-value]


def install(setting: str) -> tuple[int, int, int] | None:
    """Freeze what exists now and set the thresholds; returns them (None: defaults kept, nothing frozen)."""
    thresholds = parse(setting)
    if thresholds is None:
        return None
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return thresholds
