"""The notifier's loop: read the events topic, remember callback URLs, deliver terminal-state webhooks.

Per record, in order:
- JobSubmitted with a callback_url → a webhook_subscriptions row (written before the offset can be
  committed, so a restart long after the submission still knows where to send);
- an event a subscribed job asked to hear about (payload.py: terminal states by default; leases and
  progress milestones with `webhook_events`) → a delivery task (concurrent; retried with backoff);
- the offset becomes committable once every delivery at or below it has a final outcome in
  webhook_deliveries (offsets.py). Kill -9 at any moment: the next run re-reads from the committed offset,
  skips what the table says was delivered, and delivers the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from spotreel.platform.consumers import GROUP_MEMBER, consumer
from spotreel.codec import Codec, CodecError
from spotreel.domain import events as ev
from spotreel.services.webhooks.backoff import RetryPolicy
from spotreel.services.webhooks.metrics import WebhookMetrics
from spotreel.services.webhooks.offsets import OffsetTracker
from spotreel.services.webhooks.payload import OPENAI_STYLE, Notification, notification_for, openai_style
from spotreel.webhooks.filters import DEFAULT_FILTER
from spotreel.services.webhooks.sender import Attempt, Sender, Stopping
from spotreel.services.webhooks.store import FINAL, DeliveryResult, Subscription, WebhookStore
from spotreel.personal.vault import Erased, Vault

log = logging.getLogger("spotreel.webhooks")
T = TypeVar("T")


# The tuning knobs below are read from SPOTREEL_WEBHOOKS_<NAME> (spotreel.config.knobs.dataclass_overrides, listed in
# docs/SETTINGS.md); the wiring fields and allow_private come from Settings, the retry policy from the command's
# options.
ENV_PREFIX = "SPOTREEL_WEBHOOKS_"
NOT_FROM_ENV = frozenset({"bootstrap", "group_id", "events_topic", "gateway_url", "allow_private", "policy"})


@dataclass(frozen=True)
class NotifierConfig:
    bootstrap: str
    group_id: str
    events_topic: str
    gateway_url: str
    allow_private: bool = False
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    # Events read from the topic at most per poll.
    batch_size: int = 500
    # How long one poll waits for events before the loop looks at its deliveries and timers.
    poll_timeout_s: float = 0.5
    # How often the offsets of events whose deliveries are all settled are committed.
    commit_every_s: float = 1.0
    # Reading pauses while this many deliveries are unfinished (a receiver that is down must not make the
    # notifier buffer the whole topic in memory).
    max_in_flight: int = 2000
    # How long a tenant's signing secret is kept before it is read again (a rotated secret signs after this).
    secret_cache_s: float = 30.0
    # Jobs' webhook subscriptions kept in memory (least recently used out first).
    subscription_cache: int = 100_000


class Notifier:
    def __init__(self, config: NotifierConfig, store: WebhookStore, metrics: WebhookMetrics,
                 codec: Codec | None = None, vault: Vault | None = None) -> None:
        self.config = config
        # Opens sealed callback URLs (spotreel/personal/) at the moment of sending, the one place they are
        # needed in plain text; the subscription rows and logs keep the envelope.
        self.vault = vault
        self.store = store
        self.metrics = metrics
        self.codec = codec or Codec.default()
        self.offsets = OffsetTracker()
        self._subs: OrderedDict[str, Subscription] = OrderedDict()
        # Jobs known to have no subscription: a job's JobSubmitted comes before its other events, and its
        # subscription row is written before that offset can be committed, so "none" never changes. Spares
        # a read per lease and progress event of every job without a callback.
        self._unsubscribed: OrderedDict[str, None] = OrderedDict()
        # The highest progress milestone sent (or skipped by the filter) per job, so a milestone is handled
        # once per job and not on every later progress report; the deliveries table dedupes after a restart.
        self._milestones: OrderedDict[str, int] = OrderedDict()
        self._secrets: dict[str, tuple[float, tuple[str, ...] | None]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._assigned: set[tuple[str, int]] = set()
        # A notification may wait 100 ms more; the broker is spared a fetch per event.
        self.consumer = consumer(config.bootstrap, config.group_id, read_committed=True, fetch_wait_ms=100,
                                 quiet=True, extra=GROUP_MEMBER)

    # -- rebalance (these run inside consume(), in the polling thread) ------------------------------------

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._assigned |= {(p.topic, p.partition) for p in parts}

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        gone = {(p.topic, p.partition) for p in parts}
        self._commit_now(consumer, gone)
        self.offsets.forget(gone)
        self._assigned -= gone

    def _commit_now(self, consumer: Consumer, only: set[tuple[str, int]] | None = None) -> None:
        todo = self.offsets.to_commit(only)
        if not todo:
            return
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in todo.items()], asynchronous=False)
            self.offsets.committed(todo)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("offset commit failed (retried next round): %s", exc)

    # -- the loop -----------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, drain_s: float = 10.0) -> None:
        self.consumer.subscribe([self.config.events_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        committed_at = time.monotonic()
        async with Sender(self.config.policy, self.config.allow_private) as sender:
            try:
                while not stop.is_set():
                    if self.offsets.in_flight() >= self.config.max_in_flight:
                        await asyncio.wait(self._tasks, timeout=self.config.poll_timeout_s,
                                           return_when=asyncio.FIRST_COMPLETED)
                    else:
                        msgs = await asyncio.to_thread(self.consumer.consume, self.config.batch_size,
                                                       self.config.poll_timeout_s)
                        await self._handle(msgs, sender, stop)
                    self.metrics.in_flight.set(self.offsets.in_flight())
                    if time.monotonic() - committed_at >= self.config.commit_every_s:
                        await asyncio.to_thread(self._commit_now, self.consumer)
                        committed_at = time.monotonic()
                # Give running deliveries a moment to finish so their offsets can be committed.
                if self._tasks:
                    await asyncio.wait(self._tasks, timeout=drain_s)
            finally:
                for t in self._tasks:
                    t.cancel()
                if self._tasks:
                    await asyncio.gather(*self._tasks, return_exceptions=True)
                await asyncio.to_thread(self._commit_now, self.consumer)
                await asyncio.to_thread(self.consumer.close)

    async def _handle(self, msgs: list[Any], sender: Sender, stop: asyncio.Event) -> None:
        decoded: list[tuple[tuple[str, int], int, Any]] = []
        new_subs: list[Subscription] = []
        for m in msgs:
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("kafka: %s", m.error().str())
                continue
            tp, offset = (m.topic(), m.partition()), m.offset()
            try:
                event = self.codec.decode_message(m.value()) if m.value() is not None else None
            except CodecError as exc:
                # The projector dead-letters undecodable records; here they simply carry no webhook.
                log.warning("skipping undecodable record %s@%d: %s", tp, offset, exc)
                event = None
            if isinstance(event, ev.JobSubmitted) and event.callback_url:
                new_subs.append(Subscription(event.job_id, event.tenant, event.callback_url))
            decoded.append((tp, offset, event))
        if new_subs:
            await self._retry(lambda: asyncio.gather(*(asyncio.to_thread(self.store.subscribe, s) for s in new_subs)),
                              stop, "write subscriptions")
            # Read back: the row now also holds the event filter the gateway wrote before the submission.
            read = await self._retry(lambda: asyncio.gather(*(asyncio.to_thread(self.store.subscription, s.job_id)
                                                              for s in new_subs)), stop, "read subscriptions")
            for s, row in zip(new_subs, read):
                self._remember(row or s)
        for tp, offset, event in decoded:
            note = notification_for(event, self.config.gateway_url) if event is not None else None
            if note is not None and note.milestone is not None \
                    and note.milestone <= self._milestones.get(note.job_id, 0):
                note = None  # this milestone (or a later one) was already handled
            if note is not None:
                sub = await self._subscription(note.job_id, stop)
                if note.milestone is not None and sub is not None:
                    self._bounded(self._milestones, note.job_id, note.milestone)
                if sub is not None and note.kind not in (sub.events or DEFAULT_FILTER):
                    sub = None  # the job did not ask for this kind
                if sub is not None and sub.style == OPENAI_STYLE:
                    note = openai_style(note)
                    sub = sub if note is not None else None  # that API has no event for this kind
                if sub is not None:
                    self.offsets.begin(tp, offset)
                    task = asyncio.create_task(self._deliver(note, sub, tp, offset, sender, stop))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            self.offsets.read(tp, offset)

    def _bounded(self, cache: OrderedDict, key: str, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > self.config.subscription_cache:
            cache.popitem(last=False)

    def _remember(self, sub: Subscription) -> None:
        self._unsubscribed.pop(sub.job_id, None)
        self._bounded(self._subs, sub.job_id, sub)

    async def _subscription(self, job_id: str, stop: asyncio.Event) -> Subscription | None:
        sub = self._subs.get(job_id)
        if sub is None and job_id not in self._unsubscribed:
            sub = await self._retry(lambda: asyncio.to_thread(self.store.subscription, job_id), stop,
                                    "read a subscription")
            if sub is None:
                self._bounded(self._unsubscribed, job_id, None)
            else:
                self._remember(sub)
        return sub

    async def _secret(self, tenant: str, stop: asyncio.Event) -> tuple[str, ...] | None:
        now = time.monotonic()
        hit = self._secrets.get(tenant)
        if hit is None or now - hit[0] > self.config.secret_cache_s:
            secret = await self._retry(lambda: asyncio.to_thread(self.store.secret, tenant), stop, "read a secret")
            hit = self._secrets[tenant] = (now, secret)
        return hit[1]

    async def _retry(self, call: Callable[[], Awaitable[T]], stop: asyncio.Event, what: str) -> T:
        """Cassandra calls retry until they succeed: skipping one would lose a webhook or a subscription."""
        delay = 0.2
        while True:
            try:
                return await call()
            except Exception as exc:  # noqa: BLE001 - driver errors of every kind; all are retried
                if stop.is_set():
                    raise Stopping() from exc
                log.warning("could not %s (%s: %s); retrying in %.1fs", what, type(exc).__name__, exc, delay)
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, 10.0)

    async def _deliver(self, note: Notification, sub: Subscription, tp: tuple[str, int], offset: int,
                       sender: Sender, stop: asyncio.Event) -> None:
        try:
            prior = await self._retry(lambda: asyncio.to_thread(self.store.outcome, note.event_id), stop,
                                      "read a delivery")
            if prior is not None and prior.status in FINAL:
                self.metrics.deliveries.labels("skipped_already_final").inc()
                self.offsets.done(tp, offset)
                return
            secret = await self._secret(sub.tenant_id, stop)
            try:
                url = sub.callback_url if self.vault is None else await self.vault.open("callback_url", sub.callback_url)
            except Erased:
                url = None
            if url is None:
                outcome = DeliveryResult("refused", 0, None, "the job was erased: its callback URL is gone")
            elif not secret:
                outcome = DeliveryResult("no_secret", 0, None, f"tenant {sub.tenant_id} has no webhook secret")
            else:
                async def failed(attempt: Attempt, n: int) -> None:
                    self.metrics.attempts.labels("retry").inc()
                    log.info("webhook %s to %s: attempt %d failed (%s)", note.event_id, sub.callback_url, n,
                             attempt.error)
                    await self._retry(lambda: asyncio.to_thread(
                        self.store.record, note.event_id, sub, note.event_type,
                        DeliveryResult("retrying", n, attempt.status, attempt.error), note.version), stop,
                        "record an attempt")
                started = time.perf_counter()
                outcome = await sender.deliver(url, secret, note, failed, stop)
                self.metrics.latency.observe(time.perf_counter() - started)
            await self._retry(lambda: asyncio.to_thread(self.store.record, note.event_id, sub, note.event_type,
                                                        outcome, note.version), stop, "record a delivery")
            self.metrics.deliveries.labels(outcome.status).inc()
            if outcome.status != "delivered":
                log.warning("webhook %s to %s: %s after %d attempt(s): %s", note.event_id, sub.callback_url,
                            outcome.status, outcome.attempts, outcome.last_error)
            self.offsets.done(tp, offset)
        except Stopping:
            pass  # left pending: its offset is not committed, so the next run delivers it
        except Exception:
            log.exception("webhook %s: unexpected error; left for the next run", note.event_id)
