"""Kafka directly, for internal pools: no gateway between the worker and the scheduler.

Dispatch goes through the shared library (spotreel.dispatch), as the gateway's worker API does: RequestWork
goes to a partition that the compacted pool-stats topic shows with queued work (then the others in a ring
starting at the worker's own); the owner answers on `<prefix>.assignments`, partition
`partition_for(worker_id)`, so a worker reads exactly one partition of it. Fenced commands are produced keyed
by job id to the owner's partition, and the verdict is the event naming the command as its `causation_id`,
or a CommandRejected naming it, on the job's events partition. The worker never joins a consumer group:
partitions are assigned explicitly and nothing is committed, so thousands of spot workers coming and going
cause no rebalance.

The guarantees of the gateway's lease desk, for a worker that is its own desk:
- one outstanding RequestWork: a request not answered yet is waited for (across `lease()` calls) instead of
  asked again, until it is `stale_s` old (a partition whose owner is gone); then another partition is asked;
- a grant nobody takes is released: an answer that arrives while no `lease()` call waits for it (the call
  ended, or it already took another lease) is handed back with `ReleaseLease(reason="unclaimed")`, which
  requeues the job at once and costs it no attempt; requests are remembered for `forget_s`;
- cancel and drain are what the job's events and replies say last, by job version: the verdict fields of
  a renewal (LeaseRenewed / ProgressReported, an event or a reply), or a CancelRequested / PauseRequested /
  PreemptRequested / JobResumed since (so a pending verdict still hears of them);
- a heartbeat or progress report waits for its verdict at most `answer_seconds` (1 s) from its send, then
  counts as pending (it is on the log: judged at its append time, it keeps the lease) and paces the next
  one; a verdict that comes later is kept, and a refusal that proves the lease gone (`stale_epoch`,
  `lease_expired`, ...) is the answer to the next renewal (spotreel.dispatch.lateverdicts, as on the gateway).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable

from spotreel.runtime import tracing
from spotreel.adapters.kafka import produce_command, producer
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch import verdicts
from spotreel.dispatch.lateverdicts import LateVerdicts, answer_wait_s
from spotreel.dispatch.listener import DispatchListener, DispatchUnavailable
from spotreel.dispatch.asking import CROWD_ASKS, Asking
from spotreel.dispatch.order import request_order
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.leases import UNCLAIMED
from spotreel.domain.spec import RenderSpec
from spotreel.personal.vault import Erased
from spotreel.config.settings import Settings
from spotreel.worker.transport import WorkerLease, TransportError, Verdict, WorkerProfile, judge

log = logging.getLogger("spotreel.worker.kafka")

# How far back the job's events partition is read when a lease starts: far enough to see a cancel or pause
# requested between the grant and this worker's first look.
_EVENTS_LOOKBACK = 2000


class _Waiter:
    """A command's verdict, settled once from the listener's thread; after `give_up` a verdict that still
    comes goes to the late handler instead (a renewal answered pending)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self._lock = threading.Lock()
        self._late: Callable[[Any], None] | None = None

    def give_up(self, late: Callable[[Any], None]) -> Any:
        """The verdict if it came meanwhile; else None, and `late(verdict)` when it comes."""
        with self._lock:
            if self.done.is_set():
                return self.value
            self._late = late
            return None

    def settle(self, value: Any) -> None:
        with self._lock:
            late = self._late
            if late is None:
                if not self.done.is_set():
                    self.value = value
                    self.done.set()
                return
        late(value)


@dataclass
class _Asked:
    request_id: str
    partition: int
    at: float


class KafkaTransport:
    def __init__(self, settings: Settings, profile: WorkerProfile, *, verdict_seconds: float = 10.0,
                 answer_seconds: float = 1.0, stale_s: float = 30.0, forget_s: float = 120.0, idle_pass_seconds: float = 1.0,
                 heartbeat_seconds: float = 10.0, progress_seconds: float = 5.0, codec: Codec | None = None,
                 open_spec: Callable[[RenderSpec], RenderSpec] | None = None) -> None:
        self.settings = settings
        # The grant's sealed prompt opened with the job's data key (spotreel/personal/); None: plain text.
        self.open_spec = open_spec
        self.profile = profile
        self.codec = codec or Codec.default()
        self.verdict_seconds = verdict_seconds
        # A renewal is answered within this long of its send, as the gateway answers an HTTP worker's
        # (renewal_answer_seconds); a verdict that comes later is kept and told on the next renewal.
        self.answer_seconds = answer_seconds
        self._late = LateVerdicts()  # under self._lock
        # Verdicts of renewals answered pending, still routed here: (until, command id, job id), oldest first.
        self._following: deque[tuple[float, str, str]] = deque()
        self.stale_s = stale_s
        self.forget_s = forget_s
        self.idle_pass_seconds = idle_pass_seconds
        self.cadence = (heartbeat_seconds, progress_seconds)
        self._listener = DispatchListener(
            settings, self.codec, name=f"worker.{profile.worker_id}",
            answer_partitions=[partition_for(profile.worker_id, settings.partitions)], all_events=False)
        self._lock = threading.Lock()
        self._inbox: queue.Queue | None = None  # answers go here while a lease() call waits
        self._pending: _Asked | None = None  # the unanswered RequestWork, if any
        self._asked: dict[str, float] = {}  # request id -> sent at (monotonic), for forget_s
        # job id -> (epoch, instructions seen on its events); only the jobs this worker holds are decoded.
        self._jobs: dict[str, tuple[int, dict[str, bool]]] = {}
        self._stop = threading.Event()
        # When to ask for work (dispatch/asking.py): where the pool stats show it, with this worker's share of
        # the crowd of idle workers (one process among many), not again after a refusal until they change,
        # and the worker's own partition every 7.5 s so the scheduler knows it is idle.
        self._asking = Asking(settings.partitions, scout_s=idle_pass_seconds, stale_s=stale_s, crowd_asks=CROWD_ASKS)
        self._work_changed = threading.Event()
        self._listener.queues.on_change = self._work_changed.set
        self._producer = producer(settings, **{"message.timeout.ms": 10_000})
        self._ids = 0
        self.released_unclaimed = 0

    # -- lifecycle ---------------------------------------------------------------------------------------

    def _start(self, timeout: float = 15.0) -> None:
        try:
            self._listener.start(timeout)
        except DispatchUnavailable as exc:
            raise TransportError(str(exc)) from None

    def close(self) -> None:
        self._stop.set()
        self._drop_followed(float("inf"))  # no verdict is routed to a transport that is gone
        self._listener.close()
        self._producer.flush(5)

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self.profile.worker_id}-{self._ids}-{uuid.uuid4().hex[:8]}"

    def _send(self, command: Any, partition: int | None = None) -> None:
        from confluent_kafka import KafkaException

        try:
            produce_command(self._producer, self.settings, self.codec, command, partition,
                            headers=tracing.kafka_headers())
            left = self._producer.flush(10)
        except (KafkaException, BufferError) as exc:
            raise TransportError(f"kafka produce: {exc}") from None
        if left:
            raise TransportError("kafka produce: not acknowledged within 10 s")

    # -- dispatch ----------------------------------------------------------------------------------------

    def register(self) -> dict[str, Any]:
        # Nothing to register with: the scheduler learns about a worker from its RequestWork.
        self._start()
        hb, pr = self.cadence
        return {"worker_id": self.profile.worker_id, "heartbeat_seconds": hb, "progress_seconds": pr}

    def _on_answer(self, answer: Any) -> None:
        """On the consumer thread: an answer to one of this worker's requests."""
        if answer.worker_id != self.profile.worker_id:
            return
        with self._lock:
            if self._pending is not None and self._pending.request_id == answer.request_id:
                self._pending = None
            self._asking.answered(answer.request_id, answer, self._listener.queues.view(self.profile.models))
            if self._inbox is not None:
                self._inbox.put(answer)
                return
        if isinstance(answer, ev.WorkAssigned):
            # Nobody waits for it: hand it back, off the consumer thread (the send waits for the broker).
            threading.Thread(target=self._release_unclaimed, args=(answer,), daemon=True).start()

    def _release_unclaimed(self, answer: ev.WorkAssigned) -> None:
        command = cmd.ReleaseLease(f"unclaimed-{answer.request_id}", answer.job_id, answer.epoch, answer.worker_id,
                                   UNCLAIMED)
        try:
            self._send(command)
            self.released_unclaimed += 1
            log.info("lease %s epoch %d reached no lease() call: released", answer.job_id, answer.epoch)
        except TransportError as exc:  # Kafka down: the lease expires after its TTL instead
            log.warning("could not release unclaimed lease %s epoch %d: %s", answer.job_id, answer.epoch, exc)

    def _forget_old(self, now: float) -> None:
        for rid, at in list(self._asked.items()):
            if now - at > self.forget_s:
                self._listener.drop_answer(rid)
                del self._asked[rid]

    def _ask(self, partition: int, draining: bool, ttl: int, rid: str) -> None:
        p = self.profile
        now = time.monotonic()
        self._asked[rid] = now
        self._listener.on_answer(rid, self._on_answer)
        with self._lock:
            self._pending = _Asked(rid, partition, now)
        try:
            self._send(cmd.RequestWork(rid, p.worker_id, p.gpu_type, p.models, p.warm_models, draining, ttl,
                                       int(time.time() * 1000), p.fingerprint), partition=partition)
        except TransportError:
            with self._lock:
                self._pending = None
                self._asking.answered(rid, None)
            raise

    def lease(self, wait_seconds: float, draining: bool = False, lease_ttl_ms: int | None = None) -> WorkerLease | None:
        self._start()
        deadline = time.monotonic() + wait_seconds
        inbox: queue.Queue = queue.Queue()
        with self._lock:
            self._inbox = inbox
        try:
            return self._await_lease(inbox, deadline, draining, lease_ttl_ms or 30_000)
        finally:
            with self._lock:
                self._inbox = None
                left = []
                while not inbox.empty():
                    left.append(inbox.get_nowait())
            for answer in left:  # granted after this call had its lease or gave up: nobody takes these
                if isinstance(answer, ev.WorkAssigned):
                    self._release_unclaimed(answer)

    def _await_lease(self, inbox: queue.Queue, deadline: float, draining: bool, ttl: int) -> WorkerLease | None:
        asked = False  # a draining worker asks once: the scheduler must hear that it drains
        wid, models = self.profile.worker_id, tuple(self.profile.models)
        queues = self._listener.queues
        self._forget_old(time.monotonic())
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                pending = self._pending
            if pending is not None and now - pending.at >= self.stale_s:
                pending = None  # its owner may be gone: ask again (a late grant is released)
            if pending is None and not (draining and asked):
                self._work_changed.clear()
                if draining:
                    p: int | None = request_order(wid, self.settings.partitions, queues.partitions_with_work(models))[0]
                else:
                    with self._lock:
                        p = self._asking.pick(wid, models, queues.view(models), now)
                if p is None:
                    # Nothing worth asking: wait for the pool stats to change, or this worker's presence.
                    left = deadline - now
                    if left <= 0:
                        return None
                    self._work_changed.wait(min(left, self._asking.next_due(wid, now) or self.idle_pass_seconds,
                                                self.idle_pass_seconds))
                    continue
                rid = self._next_id("rw")
                with self._lock:
                    self._asking.sent(rid, wid, p, models, now)
                self._ask(p, draining, ttl, rid)
                asked = True
                with self._lock:
                    pending = self._pending
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait = left if pending is None else min(left, max(0.05, self.stale_s - (time.monotonic() - pending.at)))
            try:
                answer = inbox.get(timeout=wait)
            except queue.Empty:
                continue
            if isinstance(answer, ev.WorkAssigned):
                hb, pr = self.cadence
                losses, leased_s = self._listener.queues.lease_losses(answer.pool)
                lease = replace(WorkerLease.from_answer(answer), heartbeat_seconds=hb, progress_seconds=pr,
                                spec=self._opened(answer.spec),
                                pool_lease_losses_1h=losses, pool_leased_seconds_1h=leased_s,
                                traceparent=self._listener.lease_trace(answer.job_id, answer.epoch))
                self._watch(lease)
                return lease
            if draining:
                return None  # a draining worker gets no lease: one answer is the whole story
        return None

    def _opened(self, spec: RenderSpec) -> RenderSpec:
        if self.open_spec is None:
            return spec
        try:
            return self.open_spec(spec)
        except Erased:
            # Erased while it was granted: its erasure's cancel reaches this worker with its first renewal.
            return replace(spec, prompt="", negative_prompt=None)

    def _watch(self, lease: WorkerLease) -> None:
        with self._lock:
            self._jobs[lease.job_id] = (lease.epoch, {"cancel": False, "drain": False})
        self._listener.observe(lease.job_id, lambda event: self._instruct(lease.job_id, event))
        try:
            self._listener.follow(partition_for(lease.job_id, self.settings.partitions), _EVENTS_LOOKBACK)
        except DispatchUnavailable as exc:
            raise TransportError(str(exc)) from None

    def _instruct(self, job_id: str, event: Any) -> None:
        """Events and replies of a held job, as read: each says what is asked as of its version. A reply is
        as of the version it was judged against, so one read after a newer CancelRequested is ignored."""
        with self._lock:
            held = self._jobs.get(job_id)
            if held is None:
                return
            epoch, flags = held
            if getattr(event, "version", -1) < flags.get("as_of", -1):
                return
            if isinstance(event, ev.CancelRequested) and event.epoch == epoch:
                flags.update(cancel=True, as_of=event.version)
            elif isinstance(event, (ev.PauseRequested, ev.PreemptRequested)) and event.epoch == epoch:
                # Asked to checkpoint and release: a pause, or a preemption for higher-tier work.
                flags.update(drain=True, as_of=event.version)
            elif isinstance(event, ev.JobResumed):
                flags.update(drain=False, as_of=event.version)
            elif isinstance(event, (ev.LeaseRenewed, ev.ProgressReported)) and event.epoch == epoch:
                # A renewal's verdict states both as of that point in the job's history.
                told = verdicts.instructions(event) or {}
                flags.update(cancel=told["cancel"], drain=told["drain"], as_of=event.version)

    def forget(self, lease: WorkerLease) -> None:
        """The run of this lease is over: stop decoding its job's events, and stop following the verdicts of
        its renewals answered pending (nobody will renew this lease again to hear them)."""
        self._listener.observe(lease.job_id, None)
        with self._lock:
            self._jobs.pop(lease.job_id, None)
            mine = [f for f in self._following if f[2] == lease.job_id]
            if mine:
                self._following = deque(f for f in self._following if f[2] != lease.job_id)
        for _, command_id, job_id in mine:
            self._listener.drop_verdict(command_id, job_id)
        self._drop_followed(time.monotonic())

    # -- fenced commands ---------------------------------------------------------------------------------

    def _fenced(self, lease: WorkerLease, prefix: str, make: Callable[[str], Any], renewal: bool = False) -> Verdict:
        self._start()
        if lease.job_id not in self._jobs:
            self._watch(lease)
        self._drop_followed(time.monotonic())
        command = make(self._next_id(prefix))
        key = (lease.job_id, lease.epoch, self.profile.worker_id)
        waiter = _Waiter()
        self._listener.on_verdict(command.command_id, lease.job_id, waiter.settle)
        sent_at = time.monotonic()
        # Never wait out more than a third of this lease's TTL: the pulse sends nothing else meanwhile.
        verdict_s = min(self.verdict_seconds, lease.lease_ttl_ms / 3000.0)
        following = False
        try:
            self._send(command)
            if renewal and self.answer_seconds < verdict_s:
                # Answered within answer_seconds of the send, like the gateway's renewal answer
                # (spotreel.dispatch.lateverdicts): a verdict that comes later is kept for the next renewal.
                waiter.done.wait(answer_wait_s(self.answer_seconds, time.monotonic() - sent_at))
                if waiter.give_up(lambda verdict: self._note(key, verdict)) is None:
                    following = True
                    with self._lock:
                        self._following.append((sent_at + verdict_s, command.command_id, lease.job_id))
            else:
                waiter.done.wait(verdict_s)
        finally:
            if not following:
                self._listener.drop_verdict(command.command_id, lease.job_id)
        verdict = waiter.value
        kept = None
        if verdict is not None:
            self._note(key, verdict)
        elif renewal:
            with self._lock:
                kept = self._late.kept(*key)  # a refusal an earlier renewal's late verdict brought
        # The same pacing rule the gateway applies to HTTP workers, from this worker's own verdict wait.
        pace = verdicts.pace(verdict, time.monotonic() - sent_at, lease.lease_ttl_ms)
        if isinstance(kept, ev.CommandRejected):
            verdict = kept
        if isinstance(verdict, ev.CommandRejected):
            return judge(verdict.reason, verdict.detail, verdict.current_epoch)
        with self._lock:
            held = self._jobs.get(lease.job_id)
            # The events of the job in their order: the latest renewal verdict, cancel, pause or resume
            # (a late renewal verdict's cancel or drain included: it is one of those events).
            flags = {k: held[1][k] for k in ("cancel", "drain")} if held is not None else {}
        if verdict is None:
            return Verdict(accepted=False, pending=True, renew_in_s=pace, **flags)
        return Verdict(accepted=True, event=type(verdict).__name__,
                       lease_expires_at_ms=getattr(verdict, "lease_expires_at_ms", None), renew_in_s=pace, **flags)

    def _note(self, key: tuple[str, int, str], verdict: Any) -> None:
        with self._lock:
            self._late.note(*key, verdict)

    def _drop_followed(self, now: float) -> None:
        """Stop routing the verdicts of renewals answered pending once their time is up (each once)."""
        with self._lock:
            due = []
            while self._following and self._following[0][0] <= now:
                due.append(self._following.popleft())
        for _, command_id, job_id in due:
            self._listener.drop_verdict(command_id, job_id)

    def _fence(self, lease: WorkerLease) -> tuple[str, int, str]:
        return lease.job_id, lease.epoch, self.profile.worker_id

    def heartbeat(self, lease: WorkerLease) -> Verdict:
        return self._fenced(lease, "renew", lambda c: cmd.RenewLease(c, *self._fence(lease)), renewal=True)

    def progress(self, lease: WorkerLease, step: int, progress_pct: float, phase: str) -> Verdict:
        return self._fenced(lease, "prog", lambda c: cmd.ReportProgress(c, *self._fence(lease), step, progress_pct, phase),
                            renewal=True)

    def checkpoint(self, lease: WorkerLease, key: str, step: int, progress_pct: float, checksum: str,
                   size_bytes: int, duration_ms: int | None = None, fingerprint: str = "") -> Verdict:
        return self._fenced(lease, "ckpt", lambda c: cmd.RecordCheckpoint(c, *self._fence(lease), key, step,
                                                                          progress_pct, checksum, size_bytes,
                                                                          duration_ms, fingerprint))

    def complete(self, lease: WorkerLease, artifact_key: str, checksum: str, size_bytes: int) -> Verdict:
        return self._fenced(lease, "done", lambda c: cmd.CompleteJob(c, *self._fence(lease), artifact_key, checksum,
                                                             size_bytes))

    def fail(self, lease: WorkerLease, error_code: str, message: str, retryable: bool = True,
             invalid_checkpoint_key: str | None = None) -> Verdict:
        return self._fenced(lease, "fail", lambda c: cmd.FailJob(c, *self._fence(lease), error_code, message[:2000],
                                                         retryable, invalid_checkpoint_key))

    def release(self, lease: WorkerLease, reason: str = "preempted") -> Verdict:
        return self._fenced(lease, "rel", lambda c: cmd.ReleaseLease(c, *self._fence(lease), reason))
