"""What tracing costs the scheduler per command (spotreel/runtime/tracing.py, services/scheduler/traces.py).

The scheduler's loop (services/scheduler/command_batches.py `on_batch`) gained, per command: reading the record's
headers, a clock read only when there are headers, and `if given or traces.by_job:`. This runs the real
Handler on SubmitJob commands of fresh jobs (decode, decide, evolve: the per-command work the loop does
anyway) three ways, in one process, interleaved rounds, best of each:
  off     the loop as it was (no tracing lines);
  idle    the tracing lines, records without headers, nothing traced (the default: SPOTREEL_TRACE_SAMPLE=0
          and no caller sends a traceparent);
  traced  every record carries a sampled traceparent: a span per command, exported as a JSON log line
          (to a handler that drops it, so the bench measures the span and its formatting, not a disk).
It prints µs per command and the ratios to `off`. Under a minute: `.venv/bin/python bench/trace_overhead.py`.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from typing import Any

from spotreel.runtime import tracing
from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain.spec import RenderSpec
from spotreel.services.scheduler.handler import Handler
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.traces import JobTraces

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Msg:
    key: bytes
    value: bytes
    offset: int
    headers: Any


def records(codec: Codec, n: int, tag: str, traced: bool) -> list[Msg]:
    out = []
    for i in range(n):
        key = f"{tag}-{i}"
        job_id = ids.job_id_for("bench", key)
        cmd = c.SubmitJob(command_id=f"s-{key}", job_id=job_id, tenant="bench", idempotency_key=key,
                          request_hash="h", gpu_type="cpu",
                          spec=RenderSpec(model="m", prompt="a fox", duration_s=2.0, resolution="64x64", fps=8, seed=1,
                                          num_steps=20))
        headers = [("traceparent", TRACEPARENT.encode())] if traced else []
        out.append(Msg(job_id.encode(), codec.encode_message(cmd), i, headers))
    return out


def run(mode: str, msgs: list[Msg], handler: Handler) -> float:
    part = PartitionState(0)
    traces = JobTraces()
    now = int(time.time() * 1000)
    t0 = time.perf_counter()
    if mode == "off":
        for msg in msgs:
            handler.handle(part, "cmds", msg.offset, msg.key, msg.value, now, None)
    else:
        for msg in msgs:
            given = msg.headers
            started = time.time_ns() if given else None
            out = handler.handle(part, "cmds", msg.offset, msg.key, msg.value, now, None)
            traced = None
            if given or traces.by_job:
                traced = traces.on_command(given, out, 0, msg.offset, started)
            if traced is not None:
                traces.by_job.clear()  # as a job that ended: keep the map as small as in `idle`
    return (time.perf_counter() - t0) / len(msgs) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    logging.getLogger("spotreel.trace").addHandler(logging.NullHandler())
    logging.getLogger("spotreel.trace").propagate = False
    logging.getLogger("spotreel.trace").setLevel(logging.INFO)
    tracing.setup("bench", env={})
    codec = Codec.default()
    handler = Handler(codec, 1, lambda _: None)
    best = {"off": float("inf"), "idle": float("inf"), "traced": float("inf")}
    for r in range(args.rounds):
        for mode in best:
            msgs = records(codec, args.commands, f"{mode}{r}", traced=mode == "traced")
            best[mode] = min(best[mode], run(mode, msgs, handler))
    off = best["off"]
    for mode, us in best.items():
        print(f"{mode:>7}: {us:7.2f} µs/command  ratio to off {us / off:.3f}")


if __name__ == "__main__":
    main()
