"""A command past the next expected offset is refused, never acked, and read again in order (ordering.py).

The consumer here is a stand-in for Faust's (the four calls the guard makes); what it records is what the
guard asked of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from spotreel.services.scheduler import ordering
from spotreel.services.scheduler.metrics import Metrics
from spotreel.services.scheduler.ordering import MAX_REWINDS, InOrder
from spotreel.services.scheduler.partition import PartitionState

TOPIC = "spotreel.commands"


@dataclass(frozen=True)
class TP:
    topic: str
    partition: int


_TP = TP(TOPIC, 0)


@dataclass
class Consumer:
    log_start: int = 0
    high: int = 1_000
    seeks: list[tuple[int, int]] = field(default_factory=list)

    async def earliest_offsets(self, *tps: Any) -> dict[Any, int]:
        return {tp: self.log_start for tp in tps}

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append((tp.partition, offset))

    def assignment(self) -> list[Any]:
        return [_TP]

    def highwater(self, tp: Any) -> int:
        return self.high


def guard_on(consumer: Consumer) -> InOrder:
    """The real order guard on one partition, its consumer a stand-in (the part's only I/O)."""
    return InOrder(SimpleNamespace(consumer=consumer), TOPIC, {0: PartitionState(0)}, Metrics())




def msg(offset: int) -> Any:
    return SimpleNamespace(offset=offset, tp=_TP, acked=False)


async def read(guard: InOrder, offsets: list[int]) -> list[int]:
    """One batch through the guard; the offsets it lets through are read (read_upto moves as the pipeline's)."""
    part = guard.parts[0]
    rewound: set[int] = set()
    passed = []
    for offset in offsets:
        m = msg(offset)
        if await guard.next_in_order(part, m, rewound):
            part.read_log(offset, None)
            passed.append(offset)
        else:
            assert m.acked, "a refused command must never be acked: Faust would commit the hole"
    return passed


async def test_commands_in_order_pass_and_redelivered_ones_too() -> None:
    guard = guard_on(Consumer())
    assert await read(guard, [0, 1, 2, 3]) == [0, 1, 2, 3]
    assert await read(guard, [1, 2, 3, 4]) == [1, 2, 3, 4]  # a redelivery after a seek to the committed offset
    assert guard.app.consumer.seeks == []


async def test_a_stale_record_past_a_hole_is_refused_and_the_partition_read_again_from_the_hole() -> None:
    consumer = Consumer()
    guard = guard_on(consumer)
    assert await read(guard, [0, 1, 2]) == [0, 1, 2]
    # After a rebalance: a record fetched before the seek (9), then the ones after it in the same fetch.
    assert await read(guard, [9, 10, 11]) == []
    assert consumer.seeks == [(0, 3)], "one rewind per batch, to the first offset never read"
    assert guard.metrics.out_of_order._value.get() == 3
    # The broker sends everything again from 3, in order: nothing in the hole is lost.
    assert await read(guard, [3, 4, 5, 6, 7, 8, 9, 10, 11]) == [3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert guard.parts[0].rewinds == 0


async def test_a_hole_left_by_retention_is_read_past_with_no_rewind() -> None:
    consumer = Consumer(log_start=50)
    guard = guard_on(consumer)
    assert await read(guard, [0, 1]) == [0, 1]
    assert await read(guard, [50, 51]) == [50, 51]
    assert consumer.seeks == []
    # A record past the new log start still waits for the ones between.
    assert await read(guard, [60]) == []
    assert consumer.seeks == [(0, 52)]


async def test_a_hole_every_rewind_comes_back_past_is_taken_as_real_in_the_end() -> None:
    consumer = Consumer()
    guard = guard_on(consumer)
    assert await read(guard, [0]) == [0]
    for _ in range(MAX_REWINDS):
        assert await read(guard, [5]) == []
    assert len(consumer.seeks) == MAX_REWINDS and set(consumer.seeks) == {(0, 1)}
    assert await read(guard, [5, 6]) == [5, 6]
    assert guard.metrics.holes_accepted._value.get() == 1


async def test_a_rewind_whose_records_never_came_is_sought_again_unless_nothing_is_left(monkeypatch) -> None:
    now = [1_000_000]
    monkeypatch.setattr(ordering.clock, "now_ms", lambda: now[0])
    consumer = Consumer(high=20)
    guard = guard_on(consumer)
    await read(guard, [0, 1, 2, 9])
    assert consumer.seeks == [(0, 3)]
    await guard.rewind_stalled(now[0] + ordering.REWIND_AGAIN_MS - 1)
    assert consumer.seeks == [(0, 3)], "too early to seek again"
    await guard.rewind_stalled(now[0] + ordering.REWIND_AGAIN_MS)
    assert consumer.seeks == [(0, 3), (0, 3)]
    consumer.high = 3  # nothing past what was read: no hole to wait for
    now[0] += 10 * ordering.REWIND_AGAIN_MS
    await guard.rewind_stalled(now[0])
    assert consumer.seeks == [(0, 3), (0, 3)] and guard.parts[0].rewinds == 0
