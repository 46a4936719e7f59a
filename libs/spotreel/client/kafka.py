"""Submit and control jobs over Kafka, as the gateway would, and learn what the scheduler made of each command.

Why it exists: an internal service may produce commands to `<prefix>.commands` itself (schemas/README.md,
"Submitting a job without the gateway"), but by the docs alone that meant re-implementing the job-id formula,
the request hash, the seed, the partitioner and the gateway's validation; one slip and the command is
refused (`job_id_mismatch`) or lands on a partition whose owner never applies it. This module uses the
gateway's own functions (`spotreel.api.submission`'s `normalize` and `build_submit`, `ids`, `partition_for`), so a job
submitted here has the same id and request hash as a `POST /v1/videos` of the same body under the same tenant
and Idempotency-Key, and either one replays the other.

How a producer learns the outcome: every verdict of the scheduler is an event on `<prefix>.events`, in the
job's partition (the same number as its commands partition), after the command: an accepted command's events
carry `causation_id == command_id`; a refused one is a `CommandRejected` with that `causation_id` (also for a
job that does not exist, version 0). `send_*` notes the events partition's end offset before producing;
`verdict(sent)` reads from there until the command's first event, or gives up after `timeout_s`
(`Verdict.state == "pending"`: the command is durable and will still be judged, or, for an identical
resubmission, the domain had nothing to do and wrote nothing).

What the gateway adds and this does not: admission (rate, in-flight, ETA), the check that parents exist, the
plan's priority ceiling, the Idempotency-Key claim (a different body under a used key is refused by the
scheduler, `idempotency_key_reused`, not by a 409) and the placeholder row (GET answers 404 until the projector
has the job). Synchronous (confluent-kafka); one instance per thread.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from spotreel.platform.consumers import consumer
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec, CodecError
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.platform.topics import commands_topic, events_topic
from spotreel.config.settings import Settings


class InvalidRequest(ValueError):
    """The body would be a 4xx at the gateway: nothing was produced. `field` names the culprit."""

    def __init__(self, field: str | None, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.field, self.message, self.status = field, message, status


class NotDelivered(RuntimeError):
    """Kafka did not acknowledge the command (acks=all) in time: it may or may not have been written. Sending
    the same submit again is safe (same job id and hash)."""


@dataclass(frozen=True)
class Sent:
    job_id: str
    command_id: str
    command_type: str
    partition: int
    # The events partition's end before the command was produced: its verdict can only come after it.
    events_from: int
    request_hash: str | None = None


@dataclass(frozen=True)
class Verdict:
    state: str                 # "accepted", "rejected" or "pending" (no verdict within the timeout)
    event: Any = None          # the first event the command caused, or its CommandRejected
    reason: str | None = None  # CommandRejected.reason (job_id_mismatch, invalid_request, invalid_state, ...)
    detail: str | None = None


class KafkaJobClient:
    def __init__(self, settings: Settings | None = None, cfg: Any = None, *, ack_timeout_s: float = 10.0,
                 vault: Any = None) -> None:
        """`cfg`: the gateway's GatewayConfig (its defaults and limits); default the gateway's defaults, with
        the operator's model registry when `settings.model_registry` is set, as `spotreel gateway` does.
        `vault`: a spotreel.personal Vault; a submission's personal fields are sealed with it as the gateway
        seals them (None: sent as given, for a deployment with encryption off)."""
        self.vault = vault
        from confluent_kafka import Producer

        from spotreel.api.config import GatewayConfig

        self.settings = settings or Settings.from_env()
        cfg = cfg or GatewayConfig()
        if cfg.models is None and self.settings.model_registry:
            from spotreel.model_registry import load

            cfg = replace(cfg, models=load(self.settings.model_registry))
        self.cfg = cfg
        self.codec = Codec.default()
        self.ack_timeout_s = ack_timeout_s
        self.commands, self.events = commands_topic(self.settings), events_topic(self.settings)
        self.producer = Producer({"bootstrap.servers": self.settings.kafka_bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 1, "message.timeout.ms": int(ack_timeout_s * 1000)})
        self.consumer = consumer(self.settings.kafka_bootstrap, f"spotreel-client-{uuid.uuid4().hex}",
                                 read_committed=True, extra={"enable.partition.eof": False})

    # -- commands ---------------------------------------------------------------------------------------

    def submit(self, tenant: str, idempotency_key: str, body: dict[str, Any], *, now_ms: int | None = None) -> Sent:
        """`body`: the fields of POST /v1/videos (validated and defaulted exactly as the gateway does)."""
        from spotreel.api.errors import ApiError
        from spotreel.api.submission import KEY, RESERVED_KEY_PREFIX, build_submit, normalize

        if not tenant or "\0" in tenant:
            raise InvalidRequest("tenant", "tenant must be non-empty, without NUL")
        if not KEY.fullmatch(idempotency_key) or idempotency_key.startswith(RESERVED_KEY_PREFIX):
            raise InvalidRequest("Idempotency-Key", "1-200 printable ASCII characters, not starting with "
                                 f"{RESERVED_KEY_PREFIX!r}", 400)
        if body.get("webhook_events") is not None:
            # The filter lives in the gateway's Cassandra row, which this client does not write.
            raise InvalidRequest("webhook_events", "webhook_events is only taken by the gateway (POST /v1/videos); "
                                 "over Kafka a callback gets the default: completed and failed")
        try:
            normalized = normalize(body, self.cfg, allow_private_callbacks=bool(self.settings.webhook_allow_private))
        except ApiError as exc:
            raise InvalidRequest(exc.field, exc.message, exc.status) from None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        submit = build_submit(tenant, idempotency_key, normalized, now, uuid.uuid4().hex, self.cfg)
        if self.vault is not None:
            from spotreel.personal.fields import seal_record

            sealer = self.vault.sealer_sync(submit.job_id, tenant)
            submit = seal_record(replace(submit, request_hash=sealer.keyed_hash(submit.request_hash)), sealer)
        return self._send(submit, submit.request_hash)

    def cancel(self, job_id: str, reason: str = "internal") -> Sent:
        return self._send(cmd.CancelJob(uuid.uuid4().hex, job_id, reason=reason))

    def pause(self, job_id: str, reason: str = "internal") -> Sent:
        return self._send(cmd.PauseJob(uuid.uuid4().hex, job_id, reason=reason))

    def resume(self, job_id: str) -> Sent:
        return self._send(cmd.ResumeJob(uuid.uuid4().hex, job_id))

    def retry(self, job_id: str, reason: str = "internal") -> Sent:
        """Requeue a failed or dead-lettered job with a fresh attempt budget."""
        return self._send(cmd.RequeueJob(uuid.uuid4().hex, job_id, reason=reason))

    def set_priority(self, job_id: str, priority: int) -> Sent:
        from spotreel.api.submission import PRIORITY_RANGE

        lo, hi = PRIORITY_RANGE
        if isinstance(priority, bool) or not isinstance(priority, int) or not lo <= priority <= hi:
            raise InvalidRequest("priority", f"priority must be an integer between {lo} and {hi}")
        return self._send(cmd.Reprioritize(uuid.uuid4().hex, job_id, priority=priority))

    def _send(self, command: Any, request_hash: str | None = None) -> Sent:
        from confluent_kafka import TopicPartition

        p = partition_for(command.job_id, self.settings.partitions)
        _, end = self.consumer.get_watermark_offsets(TopicPartition(self.events, p), timeout=self.ack_timeout_s)
        outcome: list[Any] = []
        self.producer.produce(self.commands, key=command.job_id.encode(), value=self.codec.encode_message(command),
                              partition=p, on_delivery=lambda err, msg: outcome.append(err))
        self.producer.flush(self.ack_timeout_s + 5)
        if not outcome or outcome[0] is not None:
            raise NotDelivered(f"{type(command).__name__} for {command.job_id}: "
                               f"{outcome[0] if outcome else 'no acknowledgement in time'}")
        return Sent(command.job_id, command.command_id, type(command).__name__, p, end, request_hash)

    # -- outcomes ---------------------------------------------------------------------------------------

    def verdict(self, sent: Sent, timeout_s: float = 10.0) -> Verdict:
        """The scheduler's verdict on `sent`, read from the job's events partition (see the module doc)."""
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.events, sent.partition, sent.events_from)])
        deadline = time.monotonic() + timeout_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                msg = self.consumer.poll(min(left, 0.5))
                if msg is None or msg.error() is not None or msg.value() is None:
                    continue
                if msg.key() != sent.job_id.encode():
                    continue
                try:
                    event = self.codec.decode_message(msg.value())
                except CodecError:
                    continue
                if getattr(event, "causation_id", None) != sent.command_id:
                    continue
                if isinstance(event, ev.CommandRejected):
                    return Verdict("rejected", event, event.reason, event.detail)
                return Verdict("accepted", event)
            return Verdict("pending")
        finally:
            self.consumer.unassign()

    def close(self) -> None:
        self.producer.flush(self.ack_timeout_s)
        self.consumer.close()

    def __enter__(self) -> "KafkaJobClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
