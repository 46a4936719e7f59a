"""Commands to Kafka for asyncio callers, awaited until the broker acknowledged them (acks=all, idempotent
producer).

confluent-kafka reports deliveries from `poll()`; one daemon thread polls and hands the reports to the
event loop through a `Handoff` (aio.py): one wake-up of the loop for the reports that arrive before it runs,
not a self-pipe write and read per report (about 3% of the gateway's CPU at the HTTP peak, py-spy). A command
goes to the partition the shared partitioner (spotreel.adapters.partitioning) gives its key, the one whose
scheduler owns the job, unless the caller names one (a RequestWork). A command sent inside a sampled span (a
traced HTTP request) carries its `traceparent` header (spotreel/tracing.py), and one sent for a worker's
request the gateway's worker API handles carries its intake headers (intake.py).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from spotreel import tracing
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch import intake
from spotreel.dispatch.aio import Handoff
from spotreel.dispatch.listener import DispatchUnavailable
from spotreel.platform.topics import commands_topic
from spotreel.settings import Settings


def command_key(command: Any) -> str:
    """A job command is keyed by its job, a schedule command by its schedule, a RequestWork by its worker, a
    GatewayPulse by its gateway."""
    key: str = (getattr(command, "job_id", None) or getattr(command, "schedule_id", None)
                or getattr(command, "worker_id", None) or command.gateway_id)
    return key


class AsyncCommandSender:
    def __init__(self, settings: Settings, codec: Codec | None = None, delivery_timeout_ms: int = 10_000,
                 name: str = "gateway") -> None:
        from confluent_kafka import Producer

        self.settings = settings
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
        """Hand the command to the producer now, before this returns: it is ordered on its partition ahead of
        anything sent after it (a gateway's next pulse included). The future settles with Kafka's ack (or
        DispatchUnavailable); the current intake origin (intake.py) hears of the ack either way."""
        loop = asyncio.get_running_loop()
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = Handoff(loop)
        handoff = self._handoff
        done: asyncio.Future[None] = loop.create_future()
        on_produced = intake.produced_hook()

        def settle(err: Any) -> None:
            if done.done():
                return
            if err is not None:
                done.set_exception(DispatchUnavailable(str(err)))
            else:
                done.set_result(None)
                if on_produced is not None:
                    on_produced()

        def report(err: Any, msg: Any) -> None:
            handoff.put(settle, err)

        key = command_key(command)
        if partition is None:
            partition = partition_for(key, self.settings.partitions)
        try:
            self.producer.produce(self.topic, value=self.codec.encode_message(command), key=key.encode(),
                                  partition=partition, on_delivery=report,
                                  headers=intake.kafka_headers(tracing.kafka_headers()))
        except BufferError as exc:
            raise DispatchUnavailable(f"producer queue full: {exc}") from exc
        return done

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)
        self._stop.set()
        self._thread.join(timeout)
