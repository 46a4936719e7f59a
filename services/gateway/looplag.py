"""How far behind the gateway's event loop runs, so the worker API can pace holders when the gateway itself
is the bottleneck.

A renewal's pacing (domain.leases.renew_in_s) was judged by how long the scheduler took to answer, timed from
when the handler sent the command. A gateway short of CPU (a busy box: at the peak, other processes took half
of it) queues requests before any handler runs: workers' renewals took 30 s and more while every verdict
that did get sent came back in time, so nobody was told to slow down, clients timed out, retried, and the
gateway answered a third of what it answered with the CPU to itself. A tick that wakes `tick_s` after it
slept tells how late the loop runs; the worst lateness of the last `window_s` is added to a verdict's wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable


class LoopLag:
    def __init__(self, tick_s: float = 0.1, window_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tick_s, self.window_s, self.clock = tick_s, window_s, clock
        self._late: deque[tuple[float, float]] = deque()  # (when the tick woke, how late it was), oldest first
        self._task: asyncio.Task[None] | None = None

    def record(self, late_s: float, now: float) -> None:
        """A tick that woke `late_s` after it was due, at `now`."""
        # Only the worst of the window counts: a later, smaller lateness makes the earlier ones irrelevant.
        while self._late and self._late[-1][1] <= late_s:
            self._late.pop()
        self._late.append((now, late_s))
        self._forget(now)

    def behind_s(self, now: float | None = None) -> float:
        """The worst lateness of a tick within the last `window_s` (0 when none was late)."""
        self._forget(self.clock() if now is None else now)
        return self._late[0][1] if self._late else 0.0

    def _forget(self, now: float) -> None:
        while self._late and self._late[0][0] < now - self.window_s:
            self._late.popleft()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="gateway-loop-lag")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            due = self.clock() + self.tick_s
            await asyncio.sleep(self.tick_s)
            now = self.clock()
            self.record(max(0.0, now - due), now)
