"""Faust's changelog recovery, watched: a partition whose recovery reads nothing for `QUIET_S` is sought again.

After a rebalance Faust restores the job table from its changelog before the scheduler handles a command:
it seeks each changelog partition it now owns to where its copy stops (offset 0 for one new to the
process) and waits until it has read up to the partition's high watermark. In chaos runs (a scheduler
killed with -9, its partitions taken over by a survivor) that wait sometimes never ended: Faust logged "No
event received for active tp ... since recovery start" every 5 s for minutes and no job on those
partitions moved. In the stall this watch caught and logged (a replicas chaos run), aiokafka's fetch
position for the two partitions stood at their high watermark, Faust's read offset for them was unset and
both were active: the records had been fetched, then lost between aiokafka and the recovery (Faust's
`getmany` drops what it fetched when the flow stops or the consumer generation changes in the middle of a
batch), and nothing would fetch them again. Sought again, both were read to the end within a second.

Faust has no public way to ask for a partition to be read again during recovery. This watch runs on the
scheduler's loop every `INTERVAL_S`: while Faust is in recovery, a changelog partition with records left
and nothing read for `QUIET_S` (since recovery started, or since its last nudge) is sought to the offset
after the last record recovery applied (0 when none), which also resets Faust's read offset for it
(`seek_wait`, the call recovery itself uses). Recovery skips records it has applied, so a nudge that came
while the records were merely slow costs a re-read, never a double apply. Each nudge is logged with the
consumer's flow state (app.Scheduler.flow_state) and counted (`spotreel_scheduler_recovery_nudges_total`).

`stalled` and `resume_offset` are the decision, pure; `RecoveryWatch` reads Faust's recovery service (its
private fields, guarded: the watch does nothing when a Faust upgrade renames them) and acts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

log = logging.getLogger("spotreel.scheduler.recovery")

QUIET_S = 5.0  # as long as Faust waits before its own warning (recovery's event_timeout_secs); it goes on waiting
INTERVAL_S = 1.0

T = TypeVar("T")


def stalled(remaining: Mapping[T, int], received_at: Mapping[T, float], started_at: float | None,
            nudged_at: Mapping[T, float], now: float, quiet_s: float = QUIET_S) -> list[T]:
    """The partitions with records left to read whose last sign of life (recovery's start, the last record
    read, the last nudge) is at least `quiet_s` old. Nothing while no recovery has started."""
    if started_at is None:
        return []
    out = []
    for tp, left in remaining.items():
        if left <= 0:
            continue
        last = max(started_at, received_at.get(tp, started_at), nudged_at.get(tp, started_at))
        if now - last >= quiet_s:
            out.append(tp)
    return sorted(out, key=repr)


def resume_offset(applied: int | None) -> int:
    """Where to read a changelog partition again: after the last record recovery applied, or from the start."""
    return 0 if applied is None or applied < 0 else applied + 1


class RecoveryWatch:
    """Run `check` from a timer of the scheduler's Faust app."""

    def __init__(self, app: Any, flow_state: Callable[[], str], on_nudge: Callable[[int], None] = lambda n: None,
                 quiet_s: float = QUIET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.flow_state = flow_state
        self.on_nudge = on_nudge
        self.quiet_s = quiet_s
        self.clock = clock  # Faust stamps recovery with time.monotonic
        self.nudged_at: dict[Any, float] = {}

    async def check(self) -> list[Any]:
        """Seek the stalled changelog partitions again; returns them."""
        recovery = getattr(getattr(self.app, "tables", None), "recovery", None)
        if recovery is None or not getattr(recovery, "in_recovery", False):
            self.nudged_at.clear()
            return []
        try:
            remaining = recovery.active_remaining()
            received_at = recovery._active_events_received_at
            started_at = recovery._recovery_started_at
            applied = recovery.active_offsets
        except AttributeError:  # a Faust that renamed them: watch nothing rather than guess
            return []
        now = self.clock()
        tps = stalled(remaining, received_at, started_at, self.nudged_at, now, self.quiet_s)
        if not tps:
            return []
        consumer = self.app.consumer
        targets = {tp: resume_offset(applied.get(tp)) for tp in tps}
        log.warning("changelog recovery read nothing for %.0f s from %s (records left %s); reading them again "
                    "from %s. %s", self.quiet_s, [f"{tp.topic}[{tp.partition}]" for tp in tps],
                    {tp.partition: remaining[tp] for tp in tps}, {tp.partition: o for tp, o in targets.items()},
                    self.flow_state())
        for tp in tps:  # a failed try waits its quiet time too
            self.nudged_at[tp] = now
        try:
            await consumer.seek_wait(targets)
        except Exception as exc:  # noqa: BLE001 - a timer that raised would end; the next try comes
            log.warning("could not seek %s again (%s: %s); trying again in %.0f s", sorted(targets, key=repr),
                        type(exc).__name__, exc, self.quiet_s)
            return []
        self.on_nudge(len(tps))
        return tps
