"""The dispatch listener for asyncio callers (the gateway's worker API, the simulator's Kafka fleet):
answers and verdicts arrive on the caller's event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from spotreel.codec import Codec
from spotreel.dispatch.listener import DispatchListener
from spotreel.settings import Settings


class AsyncDispatch:
    def __init__(self, settings: Settings, codec: Codec | None = None, *, name: str = "gateway") -> None:
        self.settings = settings
        self.listener = DispatchListener(settings, codec, name=name)
        self._start_lock: asyncio.Lock | None = None

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

    def lease_losses(self, pool: str) -> tuple[int, float]:
        """The pool's lost leases and leased seconds of the last hour (pool-stats), for the lease answer."""
        return self.listener.queues.lease_losses(pool)

    def lease_trace(self, job_id: str, epoch: int) -> str | None:
        return self.listener.lease_trace(job_id, epoch)

    def watch_answer(self, request_id: str, callback: Callable[[Any], None]) -> None:
        """Call `callback(answer)` on the caller's loop for every answer to this request until forgotten."""
        loop = asyncio.get_running_loop()
        self.listener.on_answer(request_id, lambda answer: loop.call_soon_threadsafe(callback, answer))

    def forget_answer(self, request_id: str) -> None:
        self.listener.drop_answer(request_id)

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def settle(event: Any) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(event))

        self.listener.on_verdict(command_id, job_id, settle)
        return fut

    def forget_verdict(self, command_id: str, job_id: str) -> None:
        self.listener.drop_verdict(command_id, job_id)
