"""The cheap timed waits of the worker API's hot path: `result_within` (a verdict) and the lease desk's
`Mailbox` (a poll's answers). Each must behave like the asyncio primitive it replaces."""

from __future__ import annotations

import asyncio

import pytest

from spotreel.dispatch.aio import result_within
from spotreel.services.gateway.worker_api.leasedesk import Mailbox

pytestmark = pytest.mark.unit


async def test_result_within_gives_the_result_or_none_and_cancels_the_future_at_the_timeout() -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    loop.call_later(0.01, fut.set_result, "verdict")
    assert await result_within(fut, 5.0) == "verdict"
    late = loop.create_future()
    assert await result_within(late, 0.02) is None
    assert late.cancelled(), "a verdict arriving after the wait finds the future done and is dropped"
    done = loop.create_future()
    done.set_result(7)
    assert await result_within(done, 0) == 7


async def test_result_within_lets_the_callers_own_cancellation_through() -> None:
    fut = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(result_within(fut, 5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert fut.cancelled()


async def test_a_mailbox_hands_items_in_order_waits_for_one_and_times_out() -> None:
    box = Mailbox()
    assert box.empty() and await box.get_within(0.01) is None
    box.put_nowait("a")
    box.put_nowait("b")
    assert await box.get_within(0) == "a", "an item already there is taken even with no time to wait"
    assert box.get_nowait() == "b"
    with pytest.raises(asyncio.QueueEmpty):
        box.get_nowait()
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, box.put_nowait, "c")
    assert await box.get_within(5.0) == "c"
    waiting = asyncio.create_task(box.get_within(5.0))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    box.put_nowait("d")  # no waiter left: the item stays for the next get
    assert not box.empty() and await box.get_within(0) == "d"
