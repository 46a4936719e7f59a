"""The dispatch listener for asyncio callers (the gateway's worker API, the simulator's Kafka fleet):
answers and verdicts arrive on the caller's event loop."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any, Callable

from spotreel.codec import Codec
from spotreel.dispatch.listener import DispatchListener
from spotreel.dispatch.order import WorkView
from spotreel.config.settings import Settings


class Handoff:
    """Callbacks from the consumer thread, run on one event loop in batches. `call_soon_threadsafe` wakes the
    loop through its self-pipe, a write system call per call; the consumer thread routes up to 500 records a
    poll, so one wake-up per batch instead of one per answer or verdict (a write per record is a large share
    of the simulator's CPU when it plays a fleet)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, callback: Callable[[Any], None], arg: Any) -> None:
        with self._lock:
            self._items.append((callback, arg))
            if self._scheduled:
                return
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for callback, arg in items:
            callback(arg)


async def result_within(fut: asyncio.Future[Any], timeout: float) -> Any:
    """`fut`'s result, or None when `timeout` seconds pass first (`fut` is then cancelled), like
    `asyncio.wait_for` without its waiter future and callbacks (Python 3.11): a timer cancels the future, and a
    cancellation of the caller itself (`Task.cancelling`) still propagates. For a future only the caller
    waits on: a verdict or an answer it asked for."""
    loop = asyncio.get_running_loop()
    timer = loop.call_later(max(0.0, timeout), fut.cancel)
    try:
        return await fut
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return None
    finally:
        timer.cancel()


async def settled_within(fut: asyncio.Future[Any], timeout: float) -> bool:
    """Whether `fut` is done within `timeout` seconds; unlike `result_within` it is left alone when not (the
    caller may go on watching it). A cancellation of the caller itself propagates."""
    if fut.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: Any = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    fut.add_done_callback(wake)
    timer = loop.call_later(max(0.0, timeout), wake)
    try:
        await waiter
    finally:
        timer.cancel()
        fut.remove_done_callback(wake)
    return fut.done()


class AsyncDispatch:
    def __init__(self, settings: Settings, codec: Codec | None = None, *, name: str = "gateway") -> None:
        self.settings = settings
        self.listener = DispatchListener(settings, codec, name=name)
        self._start_lock: asyncio.Lock | None = None
        self._handoff: Handoff | None = None

    def _to_loop(self) -> Handoff:
        loop = asyncio.get_running_loop()
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = Handoff(loop)
        return self._handoff

    async def ensure_started(self) -> None:
        """Started on first use, so a process that never dispatches never opens the consumer. Raises
        DispatchUnavailable when Kafka cannot be reached."""
        if self.listener.started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self.listener.started:
                await asyncio.to_thread(self.listener.start)

    def close(self) -> None:
        self.listener.close()

    def partitions_with_work(self, models: tuple[str, ...]) -> list[int]:
        return self.listener.queues.partitions_with_work(models)

    def work_view(self, models: tuple[str, ...]) -> WorkView:
        """What the pool stats show for a worker of these models (order.PoolQueues.view)."""
        return self.listener.queues.view(models)

    def on_work_change(self, callback: Callable[[], None]) -> None:
        """Call `callback()` on the caller's loop whenever a partition's pool stats change what they show."""
        handoff = self._to_loop()
        self.listener.queues.on_change = lambda: handoff.put(lambda _: callback(), None)

    def lease_losses(self, pool: str) -> tuple[int, float]:
        """The pool's lost leases and leased seconds of the last hour (pool-stats), for the lease answer."""
        return self.listener.queues.lease_losses(pool)

    def lease_trace(self, job_id: str, epoch: int) -> str | None:
        return self.listener.lease_trace(job_id, epoch)

    def watch_answer(self, request_id: str, callback: Callable[[Any], None]) -> None:
        """Call `callback(answer)` on the caller's loop for every answer to this request until forgotten."""
        handoff = self._to_loop()
        self.listener.on_answer(request_id, lambda answer: handoff.put(callback, answer))

    def forget_answer(self, request_id: str) -> None:
        self.listener.drop_answer(request_id)

    def observe_job(self, job_id: str, callback: Callable[[Any], None] | None) -> None:
        """Call `callback(event)` on the caller's loop for every event of this job read from now on, on the
        events or replies topic (None: stop). One observer per job."""
        if callback is None:
            self.listener.observe(job_id, None)
            return
        handoff = self._to_loop()
        self.listener.observe(job_id, lambda event: handoff.put(callback, event))

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future[Any]:
        handoff = self._to_loop()
        fut: asyncio.Future[Any] = handoff.loop.create_future()

        def resolve(event: Any) -> None:
            if not fut.done():
                fut.set_result(event)

        self.listener.on_verdict(command_id, job_id, lambda event: handoff.put(resolve, event))
        return fut

    def forget_verdict(self, command_id: str, job_id: str) -> None:
        self.listener.drop_verdict(command_id, job_id)
