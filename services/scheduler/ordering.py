"""Commands are applied in offset order, with no hole: a command past the next expected offset is read again.

Right after a rebalance Faust's fetcher can hand the stream a record it fetched before the seek to the
committed offset: one past the next expected offset (faust-streaming issue #221). Faust then moves its read
offset to that record, drops the records in between when the seek brings them back, and counts them acked
through its gap bookkeeping, so its next commit passes them. Applying that record would have moved
`applied_upto` past commands nobody read: the scheduler's frozen-for-15-s test lost an accepted SubmitJob this
way. So a command past `read_upto + 1` is refused: not applied, never acked (Faust's commit stays below the
hole), and its partition is sought back to `read_upto + 1`, from where the broker sends everything again, in
order; already-applied commands are skipped by offset as after any redelivery.

A hole is accepted only where the broker holds no record any more: the log start moved past it (retention),
asked from the broker at the first refusal. Records the broker never serves to a consumer (the control
records of a transactional producer, which the commands topic does not have) would make every rewind come
back to the same place: after `MAX_REWINDS` rewinds without progress the hole is accepted and logged as an
error. While a partition waits for its rewind, its lease horizon stays where it was read (timers.py), so
the wait expires no lease."""

from __future__ import annotations

from dataclasses import dataclass

import logging
from typing import Any

from spotreel.services.scheduler import clock
from spotreel.services.scheduler.partition import PartitionState

log = logging.getLogger("spotreel.scheduler")

MAX_REWINDS = 20  # rewinds to the same offset with nothing read there, before a hole is taken as real
REWIND_AGAIN_MS = 1_000  # a rewind whose first record has not come within this is sought again (timer tick)


@dataclass(eq=False, repr=False)
class InOrder:
    """The order guard: over the owned partitions' states (`parts`), seeking through the Faust app's consumer
    on the commands topic; counts holes and refusals in `metrics`."""

    app: Any  # its consumer is built when the app starts: looked up on use
    commands: str
    parts: dict[int, PartitionState]
    metrics: Any

    async def next_in_order(self, part: PartitionState, msg: Any, rewound: set[int]) -> bool:
        """True if `msg` may be handled: its offset is at most the next expected one, or the hole before it is
        real. Otherwise it is marked so that Faust never acks it and (once per batch, `rewound`) its
        partition is sought back to the next expected offset."""
        expected = part.read_upto + 1
        if msg.offset <= expected:
            part.rewinds = 0
            return True
        if part.partition not in rewound:
            low = (await self.app.consumer.earliest_offsets(msg.tp)).get(msg.tp)
            if low is not None and low > expected:
                log.warning("partition %d: commands %d..%d are gone from the log (retention); reading on from %d",
                            part.partition, expected, low - 1, low)
                part.read_upto = low - 1
                if msg.offset <= low:
                    part.rewinds = 0
                    return True
            if part.rewinds >= MAX_REWINDS:
                log.error("partition %d: no record between offsets %d and %d after %d rewinds; taking the hole "
                          "as real", part.partition, part.read_upto + 1, msg.offset - 1, part.rewinds)
                self.metrics.holes_accepted.inc()
                part.rewinds = 0
                return True
        # Never acked: an acked offset past the hole would let Faust's gap bookkeeping commit the hole.
        msg.acked = True
        self.metrics.out_of_order.inc()
        if part.partition not in rewound:
            rewound.add(part.partition)
            await self.rewind(part, msg.tp)
        return False

    async def rewind(self, part: PartitionState, tp: Any) -> None:
        target = part.read_upto + 1
        log.warning("partition %d: a command arrived past offset %d (out of order after a rebalance); reading "
                    "again from %d", part.partition, target, target)
        part.rewinds += 1
        part.rewound_at_ms = clock.now_ms()
        await self.app.consumer.seek(tp, target)

    async def rewind_stalled(self, now_ms: int) -> None:
        """From the timer tick: a rewind whose records never came (Faust dropped them behind a stale record
        read after the seek) is sought again, unless nothing is left to read."""
        for tp in self.app.consumer.assignment():
            part = self.parts.get(tp.partition) if tp.topic == self.commands else None
            if part is None or not part.rewinds or now_ms - part.rewound_at_ms < REWIND_AGAIN_MS:
                continue
            high = self.app.consumer.highwater(tp)
            if high is not None and part.read_upto + 1 >= high:
                part.rewinds = 0
                continue
            await self.rewind(part, tp)
