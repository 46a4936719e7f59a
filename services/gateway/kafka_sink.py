"""Commands to Kafka, answered only once the broker acknowledged them (acks=all, idempotent producer).

confluent-kafka reports deliveries from `poll()`; one daemon thread polls and hands each report to the
event loop. Commands go to the partition the shared partitioner (spotreel.adapters.partitioning) gives
their key, the one whose scheduler owns the job.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.infra.topics import commands_topic
from spotreel.services.gateway.deps import SinkUnavailable
from spotreel.settings import Settings


class KafkaCommandSink:
    def __init__(self, settings: Settings, codec: Codec | None = None, delivery_timeout_ms: int = 10_000) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        self.topic = commands_topic(settings)
        self.codec = codec or Codec.default()
        self.producer = Producer({
            "bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2,
            # A broker that is down must surface as a 503 within seconds, not after the 5-minute default.
            "message.timeout.ms": delivery_timeout_ms,
        })
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="gateway-kafka-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    async def send(self, command: Any, partition: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def report(err, msg) -> None:
            def settle() -> None:
                if done.done():
                    return
                if err is not None:
                    done.set_exception(SinkUnavailable(str(err)))
                else:
                    done.set_result(None)
            loop.call_soon_threadsafe(settle)

        # RequestWork names no job: keyed by its worker, sent to the partition the caller chose.
        key = getattr(command, "job_id", None) or getattr(command, "schedule_id", None) or command.worker_id
        if partition is None:
            partition = partition_for(key, self.settings.partitions)
        try:
            self.producer.produce(self.topic, value=self.codec.encode_message(command), key=key.encode(),
                                  partition=partition, on_delivery=report)
        except BufferError as exc:
            raise SinkUnavailable(f"producer queue full: {exc}") from exc
        await done

    def close(self, timeout: float = 10.0) -> None:
        self.producer.flush(timeout)
        self._stop.set()
        self._thread.join(timeout)
