"""dispatch.aio.Handoff: callbacks put from another thread all run on the loop, in order, with one loop
wake-up per burst instead of one per callback."""

from __future__ import annotations

import asyncio
import threading

from spotreel.dispatch.aio import Handoff


def test_a_burst_from_the_consumer_thread_runs_in_order_with_few_wake_ups() -> None:
    async def main() -> tuple[list[int], int, set[int]]:
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop)
        wakeups = 0
        plain = loop.call_soon_threadsafe

        def counted(callback, *args):
            nonlocal wakeups
            wakeups += 1
            return plain(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        got: list[int] = []
        threads: set[int] = set()
        done = asyncio.Event()

        def record(i: int) -> None:
            got.append(i)
            threads.add(threading.get_ident())
            if i == 999:
                done.set()

        def burst() -> None:
            for i in range(1000):
                handoff.put(record, i)

        worker = threading.Thread(target=burst)
        worker.start()
        await asyncio.wait_for(done.wait(), 10)
        worker.join()
        return got, wakeups, threads

    got, wakeups, threads = asyncio.run(main())
    assert got == list(range(1000))
    assert threads == {threading.main_thread().ident}
    assert 1 <= wakeups < 1000  # batched: the loop drains whatever accumulated since its last wake-up


def test_a_put_after_a_drain_wakes_the_loop_again() -> None:
    async def main() -> list[str]:
        handoff = Handoff(asyncio.get_running_loop())
        seen: list[str] = []
        for word in ("a", "b"):
            arrived = asyncio.Event()
            threading.Thread(target=handoff.put, args=(lambda w: (seen.append(w), arrived.set()), word)).start()
            await asyncio.wait_for(arrived.wait(), 5)
        return seen

    assert asyncio.run(main()) == ["a", "b"]
