"""Commands to Kafka for asyncio callers, awaited until the broker acknowledged them (acks=all, idempotent
producer).

confluent-kafka reports deliveries from `poll()`; one daemon thread polls and hands the reports to the
event loop through a `Handoff` (aio.py): one wake-up of the loop for the reports that arrive before it runs,
not a self-pipe write and read per report (a visible share of the gateway's CPU under load). A command
goes to the partition the shared partitioner (spotreel.adapters.partitioning) gives its key, the one whose
scheduler owns the job, unless the caller names one (a RequestWork). A command sent inside a sampled span (a
traced HTTP request) carries its `traceparent` header (spotreel/runtime/tracing.py), and one sent for a worker's
request the gateway's worker API handles carries its intake headers (intake.py).

The renewal window (`renewal_window_ms` > 0, the gateway's worker API): a heartbeat or progress report taken
in through a gateway (an intake origin is current) and not traced is held up to that long with the others for
jobs of its partition, and they go as one RenewalBatch record (domain/renewal_batch.py), each with its own send
time; each one's future settles with the batch's ack. An idle worker's lease request (RequestWork) taken in so
is held the same way with the others that ask its partition, and goes in the same record: at the peak idle
workers' requests are most of the commands topic. Any other command of a job with a renewal held sends the
held ones first, so a job's commands keep the order in which they were sent. A gateway's pulse does not wait
for the window and does not end it: the order between it and the renewals says nothing, and a held renewal
holds its gateway's vouched time back (intake.py) until its batch is on the topic.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from spotreel.runtime import tracing
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch import intake
from spotreel.dispatch.aio import Handoff
from spotreel.dispatch.listener import DispatchUnavailable
from spotreel.domain.commands import BATCHED_COMMANDS, DISPATCH_COMMANDS, RenewalBatch, batched
from spotreel.platform.topics import commands_topic
from spotreel.config.settings import Settings


# What the renewal window holds: renewals, and lease requests (RequestWork).
_WINDOWED = (*BATCHED_COMMANDS, *DISPATCH_COMMANDS)


def command_key(command: Any) -> str:
    """A job command is keyed by its job, a schedule command by its schedule, a RequestWork by its worker, a
    GatewayPulse by its gateway."""
    key: str = (getattr(command, "job_id", None) or getattr(command, "schedule_id", None)
                or getattr(command, "worker_id", None) or command.gateway_id)
    return key


@dataclass
class _Window:
    """Renewals and lease requests held for one partition (see the module's doc); a future and intake hook
    for each."""
    gateway_id: str
    timer: asyncio.TimerHandle
    renewals: list[Any] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    settles: list[Callable[[Any], None]] = field(default_factory=list)


class AsyncCommandSender:
    def __init__(self, settings: Settings, codec: Codec | None = None, delivery_timeout_ms: int = 10_000,
                 name: str = "gateway", renewal_window_ms: float = 0.0, renewal_batch_max: int = 200) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        self.renewal_window_s = renewal_window_ms / 1000.0
        self.renewal_batch_max = renewal_batch_max
        self._windows: dict[int, _Window] = {}
        self._batch_ids = itertools.count()
        self._batch_prefix = f"rb-{secrets.token_hex(6)}-"
        self.batches = 0  # RenewalBatch records sent, and the renewals and lease requests in them
        self.batched = 0
        self.batched_requests = 0
        self.topic = commands_topic(settings)
        self.codec = codec or Codec.default()
        self.producer = Producer({
            "bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2,
            # A broker that is down must surface within seconds (a 503), not after the 5-minute default.
            "message.timeout.ms": delivery_timeout_ms,
        })
        self._stop = threading.Event()
        self._handoff: Handoff | None = None
        self._thread = threading.Thread(target=self._poll, name=f"{name}-kafka-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    async def send(self, command: Any, partition: int | None = None) -> None:
        await self.send_nowait(command, partition)

    def send_nowait(self, command: Any, partition: int | None = None) -> asyncio.Future[None]:
        """Hand the command to the producer now, before this returns, or hold it in the renewal window (see the
        module's doc): either way it is ordered ahead of anything sent after it for its job, and a command
        sent now is ordered on its partition ahead of anything sent after it (a gateway's next pulse
        included). The future settles with Kafka's ack (or
        DispatchUnavailable); the current intake origin (intake.py) hears of the ack either way."""
        loop = asyncio.get_running_loop()
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = Handoff(loop)
        handoff = self._handoff
        done: asyncio.Future[None] = loop.create_future()
        settle = _settler(done, intake.produced_hook())
        key = command_key(command)
        if partition is None:
            partition = partition_for(key, self.settings.partitions)
        trace = tracing.kafka_headers()
        came = intake.current()
        if (self.renewal_window_s > 0 and came is not None and not trace
                and isinstance(command, _WINDOWED)):
            self._hold(loop, partition, came, command, settle)
            return done
        job_id = getattr(command, "job_id", None)
        held = self._windows.get(partition)
        if held is not None and job_id is not None and any(r.job_id == job_id for r in held.renewals):
            self._flush(partition)  # a job's commands keep their order: its held renewal goes first

        def report(err: Any, msg: Any) -> None:
            handoff.put(settle, err)

        try:
            self.producer.produce(self.topic, value=self.codec.encode_message(command), key=key.encode(),
                                  partition=partition, on_delivery=report, headers=intake.kafka_headers(trace))
        except BufferError as exc:
            raise DispatchUnavailable(f"producer queue full: {exc}") from exc
        return done

    def _hold(self, loop: asyncio.AbstractEventLoop, partition: int, came: tuple[str, int], command: Any,
              settle: Callable[[Any], None]) -> None:
        window = self._windows.get(partition)
        if window is not None and window.gateway_id != came[0]:  # another gateway in this process: its own batch
            self._flush(partition)
            window = None
        if window is None:
            window = self._windows[partition] = _Window(
                came[0], loop.call_later(self.renewal_window_s, self._flush, partition))
        if isinstance(command, DISPATCH_COMMANDS):
            window.requests.append(command)
        else:
            window.renewals.append(batched(command, came[1]))
        window.settles.append(settle)
        if len(window.settles) >= self.renewal_batch_max:
            self._flush(partition)

    def _flush(self, partition: int) -> None:
        """Send what is held for `partition` as one RenewalBatch; each one's future settles with its ack."""
        window = self._windows.pop(partition, None)
        if window is None:
            return
        window.timer.cancel()
        handoff = self._handoff
        assert handoff is not None
        settles = window.settles

        def settle_all(err: Any) -> None:
            for settle in settles:
                settle(err)

        def report(err: Any, msg: Any) -> None:
            handoff.put(settle_all, err)

        batch = RenewalBatch(f"{self._batch_prefix}{next(self._batch_ids):x}", window.gateway_id,
                             tuple(window.renewals), tuple(window.requests))
        try:
            self.producer.produce(self.topic, value=self.codec.encode_message(batch), key=window.gateway_id.encode(),
                                  partition=partition, on_delivery=report,
                                  headers=[(intake.GATEWAY_HEADER, window.gateway_id.encode())])
        except BufferError as exc:
            settle_all(DispatchUnavailable(f"producer queue full: {exc}"))
            return
        self.batches += 1
        self.batched += len(window.renewals)
        self.batched_requests += len(window.requests)

    def close(self, timeout: float = 10.0) -> None:
        for partition in list(self._windows):
            self._flush(partition)
        self.producer.flush(timeout)
        self._stop.set()
        self._thread.join(timeout)


def _settler(done: asyncio.Future[None], on_produced: Callable[[], None] | None) -> Callable[[Any], None]:
    """Settle `done` with a delivery report's error (DispatchUnavailable) or success, telling the intake
    origin (intake.py) of the ack either way."""
    def settle(err: Any) -> None:
        if done.done():
            return
        if err is not None:
            done.set_exception(err if isinstance(err, DispatchUnavailable) else DispatchUnavailable(str(err)))
        else:
            done.set_result(None)
            if on_produced is not None:
                on_produced()
    return settle
