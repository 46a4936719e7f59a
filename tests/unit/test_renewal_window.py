"""The gateway's renewal window (spotreel.dispatch.sender) and the listener's side of it: heartbeats and
progress reports taken in through a gateway go as one RenewalBatch per partition and window, each settling
with the batch's ack; everything else goes alone and after what is held for its partition; the batch's
RenewalReplies record is routed reply by reply. The producer here is a stand-in for confluent-kafka's that
acknowledges on `poll`; the real broker side is the gateway's integration tests (the window is on there)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from spotreel.adapters.kafka import BATCH_REPLY_KEY_PREFIX
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch import intake
from spotreel.dispatch.listener import DispatchListener, DispatchUnavailable
from spotreel.dispatch.sender import AsyncCommandSender
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.config.settings import Settings
from tests.unit.test_dispatch_library import _Msg

codec = Codec.default()


class Producer:
    """confluent-kafka's Producer as the sender uses it: `produce` queues, `poll` reports (ack or `fail`)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._reports: list[Any] = []
        self._lock = threading.Lock()
        self.fail: str | None = None

    def produce(self, topic, value, key, partition, on_delivery, headers) -> None:
        with self._lock:
            self.records.append({"topic": topic, "value": value, "key": key, "partition": partition,
                                 "headers": headers, "type": type(codec.decode_message(value)).__name__})
            self._reports.append(on_delivery)

    def poll(self, timeout: float) -> int:
        with self._lock:
            reports, self._reports = self._reports, []
        for report in reports:
            report(self.fail, None)
        if not reports:
            threading.Event().wait(min(timeout, 0.005))
        return len(reports)

    def flush(self, timeout: float) -> int:
        return 0


def _sender(window_ms: float = 50.0, batch_max: int = 200) -> tuple[AsyncCommandSender, Producer]:
    sender = AsyncCommandSender(Settings(), codec, renewal_window_ms=window_ms, renewal_batch_max=batch_max)
    fake = Producer()
    sender.producer = fake
    return sender, fake


def _jobs_on(partition: int, n: int) -> list[str]:
    found, i = [], 0
    while len(found) < n:
        job = f"job-{i}"
        if partition_for(job, Settings().partitions) == partition:
            found.append(job)
        i += 1
    return found


async def _through_gateway(sender: AsyncCommandSender, command: Any, sent_ms: int, acked: list[int],
                           partition: int | None = None) -> None:
    with intake.origin("gw-1", sent_ms, lambda: acked.append(sent_ms)):
        fut = sender.send_nowait(command, partition)
    await asyncio.wait_for(fut, 5)


def _all_through_gateway(sender: AsyncCommandSender, producer: Producer, sends: list[tuple[Any, int, int | None]],
                         acked: list[int]) -> dict[int, Any]:
    """Send (command, sent ms, partition or None) through the gateway at once; the decoded records by partition,
    after checking that each partition got one RenewalBatch."""
    async def main() -> None:
        await asyncio.gather(*(_through_gateway(sender, cmd, at, acked, partition=p) for cmd, at, p in sends))

    try:
        asyncio.run(main())
    finally:
        sender.close()
    assert [r["type"] for r in producer.records] == ["RenewalBatch"] * len({r["partition"] for r in producer.records})
    return {r["partition"]: codec.decode_message(r["value"]) for r in producer.records}


def test_renewals_through_a_gateway_go_as_one_batch_per_partition_each_settling_with_its_ack() -> None:
    sender, producer = _sender()
    jobs = _jobs_on(0, 2) + _jobs_on(1, 1)
    acked: list[int] = []
    by_partition = _all_through_gateway(sender, producer, [
        (c.RenewLease("a", jobs[0], 1, "w0"), 1000, None), (c.ReportProgress("b", jobs[1], 2, "w1", 4, 20.0), 1001, None),
        (c.RenewLease("z", jobs[2], 1, "w2"), 1002, None)], acked)
    assert len(by_partition) == 2
    assert by_partition[0].gateway_id == "gw-1" and all(r["key"] == b"gw-1" for r in producer.records)
    assert by_partition[0].commands() == [(c.RenewLease("a", jobs[0], 1, "w0"), 1000),
                                          (c.ReportProgress("b", jobs[1], 2, "w1", 4, 20.0), 1001)]
    assert by_partition[1].commands() == [(c.RenewLease("z", jobs[2], 1, "w2"), 1002)]
    assert sorted(acked) == [1000, 1001, 1002]  # each request's intake hook, once its batch was acked
    assert (sender.batches, sender.batched) == (2, 3)


def test_idle_workers_lease_requests_through_a_gateway_go_in_the_batch_of_the_partition_they_ask() -> None:
    sender, producer = _sender()
    job = _jobs_on(1, 1)[0]
    acked: list[int] = []
    # A request names its partition (the gateway's asking policy picks it), whatever the worker's id hashes to.
    asks = [c.RequestWork(f"rw{i}", f"w{i}", "h100", ("m",), sent_at_ms=at) for i, at in enumerate((2000, 2002, 2003))]
    by_partition = _all_through_gateway(sender, producer, [
        (asks[0], 2000, 1), (c.RenewLease("r", job, 1, "w7"), 2001, None), (asks[1], 2002, 1), (asks[2], 2003, 2)],
        acked)
    assert len(by_partition) == 2
    # The renewals first, then the requests: the order of their places (`cmd-entry`) at the scheduler.
    assert by_partition[1].commands() == [(c.RenewLease("r", job, 1, "w7"), 2001), (asks[0], 2000), (asks[1], 2002)]
    assert by_partition[2].requests == (asks[2],) and by_partition[2].renewals == ()
    assert sorted(acked) == [2000, 2001, 2002, 2003]
    assert (sender.batches, sender.batched, sender.batched_requests) == (2, 1, 3)


def test_a_jobs_other_commands_go_after_its_held_renewal_and_the_rest_do_not_wait() -> None:
    sender, producer = _sender(window_ms=10_000)  # held until something else goes to the partition
    job = _jobs_on(0, 1)[0]
    acked: list[int] = []

    async def main() -> None:
        held = asyncio.ensure_future(_through_gateway(sender, c.RenewLease("r", job, 1, "w0"), 1000, acked))
        await asyncio.sleep(0.05)
        assert producer.records == []
        # A pulse or another job's command names no held job: it goes, the window stays. A lease request
        # taken in through the gateway joins the window and does not end it either.
        await asyncio.wait_for(sender.send_nowait(c.GatewayPulse("gp", "gw-1", 999), partition=0), 5)
        asked = asyncio.ensure_future(_through_gateway(
            sender, c.RequestWork("rw", "w9", "h100", ("m",), sent_at_ms=1000), 1000, acked, partition=0))
        await asyncio.sleep(0.05)
        assert [r["type"] for r in producer.records] == ["GatewayPulse"]
        with intake.origin("gw-1", 1001, None):
            done = sender.send_nowait(c.CompleteJob("done", job, 1, "w0", "k", "sum", 10))
        await asyncio.wait_for(asyncio.gather(held, asked, done), 5)
        # No origin (a worker on the Kafka transport): alone at once.
        await asyncio.wait_for(sender.send_nowait(c.RenewLease("kafka", job, 1, "w0")), 5)

    try:
        asyncio.run(main())
    finally:
        sender.close()
    assert [r["type"] for r in producer.records] == ["GatewayPulse", "RenewalBatch", "CompleteJob", "RenewLease"]
    assert {r["partition"] for r in producer.records} == {0}
    batch = codec.decode_message(producer.records[1]["value"])
    assert [e for e, _ in batch.commands()] == [c.RenewLease("r", job, 1, "w0"),
                                                c.RequestWork("rw", "w9", "h100", ("m",), sent_at_ms=1000)]


def test_a_full_window_goes_at_once_and_a_zero_window_batches_nothing() -> None:
    sender, producer = _sender(window_ms=10_000, batch_max=3)
    jobs = _jobs_on(2, 3)
    acked: list[int] = []

    async def main(s: AsyncCommandSender) -> None:
        await asyncio.gather(*(_through_gateway(s, c.RenewLease(f"r{i}", j, 1, f"w{i}"), 1000 + i, acked)
                               for i, j in enumerate(jobs)))

    try:
        asyncio.run(asyncio.wait_for(main(sender), 5))  # would wait 10 s for the timer if not sent when full
    finally:
        sender.close()
    assert [r["type"] for r in producer.records] == ["RenewalBatch"]
    off, alone = _sender(window_ms=0)
    try:
        asyncio.run(main(off))
    finally:
        off.close()
    assert [r["type"] for r in alone.records] == ["RenewLease"] * 3


def test_a_batch_the_broker_refuses_fails_every_request_in_it() -> None:
    sender, producer = _sender(window_ms=5)
    producer.fail = "broker down"
    jobs = _jobs_on(0, 2)

    async def main() -> list[Any]:
        return await asyncio.gather(*(_through_gateway(sender, c.RenewLease(f"r{i}", j, 1, f"w{i}"), 1000, [])
                                      for i, j in enumerate(jobs)), return_exceptions=True)

    try:
        results = asyncio.run(main())
    finally:
        sender.close()
    assert len(producer.records) == 1
    assert all(isinstance(r, DispatchUnavailable) for r in results), results


def test_the_listener_routes_each_reply_of_a_batch_as_if_it_had_come_alone() -> None:
    lis = DispatchListener(Settings(), codec, name="unit")
    got: list[Any] = []
    seen: list[Any] = []
    lis.on_verdict("a", "j1", got.append)
    lis.on_verdict("b", "j2", got.append)
    lis.observe("j2", seen.append)
    renewed = ev.LeaseRenewed("j1", 4, 1000, "a", 1, 31_000)
    progressed = ev.ProgressReported("j2", 7, 1000, "b", 2, 3, 15.0, "denoising", 31_000)
    nobody = ev.LeaseRenewed("j3", 2, 1000, "x", 1, 31_000)
    replies = ev.RenewalReplies("rb-1", "gw-1", (renewed, nobody), (progressed,))
    lis._route(_Msg(lis.replies, BATCH_REPLY_KEY_PREFIX + b"gw-1", codec.encode_message(replies)))
    assert got == [renewed, progressed]
    assert seen == [progressed]
    assert lis._verdicts == {}


def test_the_listener_hands_each_refusal_of_a_batch_to_its_request_as_the_assignments_topic_would() -> None:
    lis = DispatchListener(Settings(), codec, name="unit")
    answers: list[Any] = []
    lis.on_answer("rw-1", answers.append)
    lis.on_answer("rw-2", answers.append)
    mine = ev.NoWorkAvailable("rw-1", "w1", 1000, "no_queued_job", 2)
    draining = ev.NoWorkAvailable("rw-2", "w2", 1000, "draining", 2)
    other = ev.NoWorkAvailable("rw-9", "w9", 1000, "no_queued_job", 2)  # another gateway's: nobody waits
    replies = ev.RenewalReplies("rb-1", "gw-1", (), (), (mine, other, draining))
    lis._route(_Msg(lis.replies, BATCH_REPLY_KEY_PREFIX + b"gw-1", codec.encode_message(replies)))
    assert answers == [mine, draining]


@pytest.mark.parametrize("entry", [c.RenewLease("a", "j", 3, "w"), c.ReportProgress("b", "j", 3, "w", 9, 45.5, "decoding")])
def test_an_entry_stands_for_the_command_it_was_made_of(entry: Any) -> None:
    batch = c.RenewalBatch("rb", "gw", (c.batched(entry, 77),))
    assert codec.decode_message(codec.encode_message(batch)).commands() == [(entry, 77)]


def test_the_gateway_exports_how_many_renewals_a_record_carried() -> None:
    from prometheus_client import generate_latest

    from spotreel.services.gateway.metrics import Metrics

    sender, _ = _sender()
    sender.batches, sender.batched, sender.batched_requests = 3, 11, 5
    metrics = Metrics.create()
    metrics.count_batches(sender)
    sender.close()
    lines = generate_latest(metrics.registry).decode().splitlines()
    assert "spotreel_gateway_renewal_batches_total 3.0" in lines
    assert "spotreel_gateway_batched_renewals_total 11.0" in lines
    assert "spotreel_gateway_batched_lease_requests_total 5.0" in lines
