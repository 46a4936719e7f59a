"""The scheduler's producer is idempotent: a batch resent after a lost answer must not land twice.

Faust enables aiokafka's idempotence only inside its transactions, which the scheduler does not use; without
it a batch whose answer a broker's kill -9 lost is resent and lands twice on the events topic. What is checked here is the producer the Faust app really builds (not a constant in our code)."""

from __future__ import annotations

from spotreel.config.settings import Settings


async def test_the_faust_app_builds_an_idempotent_acks_all_producer(tmp_path) -> None:
    from spotreel.services.scheduler.app import Scheduler

    sched = Scheduler(Settings(), data_dir=tmp_path)
    inner = sched.app.producer._new_producer()  # the aiokafka producer Faust starts; not connected
    try:
        assert inner._txn_manager is not None, "aiokafka builds a transaction manager only when idempotent"
        assert inner._sender._acks == -1
    finally:
        await inner.stop()
