"""The timer tick (every `timer_interval`, 50 ms by default): what partition.py's heap says is due (lease
deadlines, queue timeouts, schedule occurrences, ...) becomes a command on the commands topic, judged by
`decide` when it is read back like any other command. A lease deadline waits for the log: it is judged
against the append time of the newest command applied while the partition has unread commands (the lease
horizon), so a backlog never expires a lease whose renewal is still unread."""

from __future__ import annotations

from dataclasses import dataclass

import time
from typing import Any

from spotreel.codec import Codec

from spotreel.services.scheduler import clock
from spotreel.services.scheduler.ordering import InOrder
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.table import Store


@dataclass(eq=False, repr=False)
class Timers:
    """The timer tick over the owned partitions (`parts`): due timers read against the store, their commands
    sent through the Faust app's producer, a stalled rewind sought again by the order guard."""

    app: Any  # its producer and consumer are built when the app starts: looked up on use
    commands: str
    codec: Codec
    parts: dict[int, PartitionState]
    store: Store
    order: InOrder

    def __post_init__(self) -> None:
        self._last_tick = time.monotonic()  # of the previous tick

    async def fire_timers(self) -> None:
        now = clock.now_ms()
        # After a pause (the process was stopped, or starved of CPU) the high watermarks are as old as the
        # last fetch before it: until the next tick, judge every partition by how far its log was read.
        tick = time.monotonic()
        paused = tick - self._last_tick > 1.0
        self._last_tick = tick
        await self.order.rewind_stalled(now)
        for p, part in list(self.parts.items()):
            horizon = part.log_ms if paused else self._lease_horizon(p, part)
            for timer in part.due(now, self.store.get, self.store.get_schedule, horizon):
                command = timer.command()
                await self.app.producer.send(self.commands, timer.key.encode(), self.codec.encode_message(command),
                                             p, None, None)

    def _lease_horizon(self, p: int, part: PartitionState) -> int | None:
        """None when partition `p` has nothing unread (every lease deadline up to now can be judged), else
        the append time of the newest command applied: deadlines after it wait for the backlog (partition.py,
        `due`). The high watermark comes from the last fetch, so "caught up" may be a little optimistic;
        that only lets an ExpireLease through that the log order then judges correctly anyway."""
        high = self._highwater(p)
        if high is not None and part.read_upto + 1 >= high:
            return None
        return part.log_ms

    def _highwater(self, p: int) -> int | None:
        for tp in self.app.consumer.assignment():
            if tp.topic == self.commands and tp.partition == p:
                return self.app.consumer.highwater(tp)
        return None
