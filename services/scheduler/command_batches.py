"""The batch pipeline: the per-command I/O order that makes the scheduler exactly-once without Kafka
transactions (README.md, "Exactly-once without Kafka transactions").

The agent hands `Pipeline.on_batch` what Faust has buffered; for each command, in this order:
  0. refuse it if its offset is past the next expected one, and read its partition again from there
     (ordering.py: a record fetched before a rebalance's seek must not open a hole);
  1. skip it if its offset is at or below `applied_upto` (its events are already on the events topic;
     a RequestWork is answered again);
  2. decode (poison -> dead-letter topic), decide against the job table (handler.py, no I/O);
  3. produce its events to the same partition of the events topic, each with a `cmd-offset` header, and
     wait until they are acknowledged (acks=all);
  4. write the new job states and the partition's events-offset marker to the table (changelog);
  5. answer a RequestWork on the assignments topic.
A crash between any two steps loses nothing (the command was not committed, so it is redelivered) and
duplicates nothing (on assignment the owner reads the events topic's tail: rebuild.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from spotreel.adapters.kafka import BATCH_REPLY_KEY_PREFIX, CMD_ENTRY_HEADER, CMD_OFFSET_HEADER
from spotreel.adapters.partitioning import partition_for
from spotreel.dispatch import intake
from spotreel.domain import events as ev
from spotreel.domain.commands import CompleteJob, FailJob, RenewalBatch, RequestWork
from spotreel.domain.leases import PREEMPTED_FOR
from spotreel.domain.state import JobState
from spotreel.codec import Codec
from spotreel.platform.topics import (assignments_topic, commands_deadletter_topic, commands_topic, events_topic,
                                      replies_topic)
from spotreel.config.settings import Settings
from spotreel.runtime.tracing import TRACEPARENT

from spotreel.services.scheduler import clock, followups
from spotreel.services.scheduler.handler import Handler, HandlerResult, dead_letter
from spotreel.services.scheduler.ordering import InOrder
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.publishing import Publisher
from spotreel.services.scheduler.table import Store
from spotreel.services.scheduler.traces import JobTraces

log = logging.getLogger("spotreel.scheduler")


@dataclass
class _Outputs:
    """What one batch's commands produced, for the phases after the loop over them."""
    sends: list[Any] = field(default_factory=list)  # event send futures, with their partition
    writes: list[tuple[int, Any]] = field(default_factory=list)
    after_acks: list[tuple] = field(default_factory=list)  # (topic, key, value, partition[, headers])
    answers: list[tuple[Any, Any, Any]] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)  # send futures of renewal answers that are not events
    refused: list[float] = field(default_factory=list)  # produce times of a batch's requests refused in its replies
    marked: set[int] = field(default_factory=set)


@dataclass(eq=False, repr=False)
class Pipeline:
    """The command path: commands judged by `handler` against the store's cache, in order (`order`), their
    events sent through the Faust app's producer, the states written through the store, the rest published
    through `publisher`. The agent calls `on_batch` under the scheduler's batch lock."""

    app: Any  # its producer is built when the app starts: looked up on use
    settings: Settings
    codec: Codec
    handler: Handler
    parts: dict[int, PartitionState]
    store: Store
    order: InOrder
    publisher: Publisher
    metrics: Any
    traces: JobTraces

    def __post_init__(self) -> None:
        self.commands = commands_topic(self.settings)
        self.events = events_topic(self.settings)

    async def on_batch(self, batch: list[Any]) -> None:
        """The commands Faust had buffered (several partitions), in 4 phases; nothing is awaited per command:
          1. decide each one against the cache (which already holds the earlier commands' results) and
             send its events, each with its `cmd-offset` header;
          2. await every event's ack (acks=all);
          3. send the follow-up commands (followups.py) and dead letters, await their acks;
          4. write the new states and each partition's marker to the table, send the answers.
        Only then does Faust ack the batch (so its offsets may be committed). The crash proof of README.md
        holds per command: the producer keeps a partition's records in order (aiokafka has one batch in
        flight per partition), so the events that are durable after a crash are a prefix, catch-up's
        `applied_upto` is the last command whose events all landed, and anything after it is redelivered.
        A gateway's RenewalBatch is taken apart here: each renewal and lease request is judged as if it had
        come alone (a renewal at its own send time), its events carry its place (`cmd-entry`) so a batch torn
        by a crash is applied again from the next entry on, and the renewals absorbed and the requests refused
        are answered in one RenewalReplies record (a grant alone, after its events, as always)."""
        producer = self.app.producer
        outs = _Outputs()
        rewound: set[int] = set()
        for event in batch:
            msg = event.message
            p = msg.partition
            part = self.parts.get(p)
            if part is None:  # cannot happen after on_assigned; refuse to write without the catch-up
                raise RuntimeError(f"command on partition {p} before its state was rebuilt")
            if not await self.order.next_in_order(part, msg, rewound):
                continue  # past a hole: read again in order after the rewind (ordering.py)
            appended = clock.appended_ms(msg)
            part.read_log(msg.offset, appended)
            if msg.offset < part.applied_upto or (msg.offset == part.applied_upto and part.applied_entry is None):
                self.metrics.skipped.inc()
                # Its events are durable, but its answer may not be: a RequestWork is answered again.
                for again in self.handler.reanswer(part, msg.value, clock.now_ms()):
                    outs.answers.append((again, msg, None))
                continue
            # A RenewalBatch whose events landed only in part before a crash: its renewals up to this one are
            # applied (catchup.py reads it from the last event's `cmd-entry` header), the rest are judged now.
            first = part.applied_entry + 1 if msg.offset == part.applied_upto and part.applied_entry is not None else 0
            given = msg.headers
            started = time.time_ns() if given else None  # a span's start, only if the record may be traced
            # Through a gateway: its expiry judged at the worker's send time, within the gateway hold (intake.py).
            via, sent = intake.read(given) if given else (None, None)
            command = self.handler.decode(part, msg.topic, msg.offset, msg.key, msg.value, clock.now_ms())
            if isinstance(command, RenewalBatch):
                why = self.handler.misplaced(part, command)
                if why is not None:
                    self._dead_letter(part, msg, dead_letter(part, msg.topic, msg.offset, msg.key, msg.value,
                                                             clock.now_ms(), "wrong_partition", why), outs)
                    continue
                absorbed: list[Any] = []
                for i, (entry, sent_ms) in enumerate(command.commands()):
                    if i < first:  # applied before the crash: only a lease request is answered again
                        if isinstance(entry, RequestWork):
                            outs.answers.append((self.handler.answer_again(part, entry, clock.now_ms()), msg, None))
                        continue
                    fenced_at = part.intake.judged_ms(appended, sent_ms, command.gateway_id)
                    out = self.handler.judge(part, msg.topic, msg.offset, msg.key, msg.value, entry,
                                             clock.now_ms(), appended, fenced_at)
                    await self._take(part, msg, out, outs, given, started, command.gateway_id, i, absorbed)
                if absorbed:
                    outs.replies.append(await producer.send(
                        replies_topic(self.settings), BATCH_REPLY_KEY_PREFIX + command.gateway_id.encode(),
                        self.codec.encode_message(ev.RenewalReplies(
                            command.batch_id, command.gateway_id,
                            tuple(r for r in absorbed if isinstance(r, ev.LeaseRenewed)),
                            tuple(r for r in absorbed if isinstance(r, ev.ProgressReported)),
                            tuple(r for r in absorbed if isinstance(r, ev.NoWorkAvailable)))), p, None, None))
            else:
                if isinstance(command, HandlerResult):
                    out = command
                else:
                    fenced_at = part.intake.judged_ms(appended, sent, via) if via is not None else None
                    out = self.handler.judge(part, msg.topic, msg.offset, msg.key, msg.value, command,
                                             clock.now_ms(), appended, fenced_at)
                if out.deadletter is not None:
                    self._dead_letter(part, msg, out, outs)
                    continue
                await self._take(part, msg, out, outs, given, started, via, None, None)
            part.applied_upto, part.applied_entry = msg.offset, None
        for p, fut in outs.sends:
            meta = await fut
            part = self.parts[p]
            part.events_offset = max(part.events_offset, meta.offset)
        await self.publisher.send_all(outs.after_acks)
        for p, state in outs.writes:
            if isinstance(state, JobState):
                self.store.write_job(p, state)
            else:
                self.store.write_schedule(p, state)
        for p in outs.marked:
            self.store.put_marker(self.parts[p])
        answered = []
        for answer, msg, traced in outs.answers:
            worker = answer.worker_id
            partition = partition_for(worker, self.settings.partitions)
            answered.append((answer, msg, await producer.send(
                assignments_topic(self.settings), worker.encode(), self.codec.encode_message(answer), partition,
                None, [(TRACEPARENT, traced.encode())] if traced else None)))
        for fut in outs.replies:
            await fut
        for produced in outs.refused:  # a batch's refusals were sent with its replies, awaited just above
            self.metrics.dispatch_latency.observe(max(0.0, time.time() - produced))
        for part in self.parts.values():
            await self.publisher.publish_leases(part)
            await self.publisher.publish_usage(part)
        await self.publisher.publish_fresh_work(self.parts)
        for answer, msg, fut in answered:
            await fut
            part = self.parts.get(msg.partition)
            if isinstance(answer, ev.WorkAssigned) and part is not None:
                # A pause between the grant and this ack (a frozen or starved scheduler) is not the holder's:
                # its lease runs a full TTL from the answer (domain/renewals.py, `after_answer`).
                part.answered(self.store.cache.get(answer.job_id), answer.epoch, clock.now_ms())
            if msg.timestamp:
                self.metrics.dispatch_latency.observe(max(0.0, time.time() - msg.timestamp))

    def _dead_letter(self, part: PartitionState, msg: Any, out: HandlerResult, outs: _Outputs) -> None:
        self.metrics.commands.inc()  # a poison record is processed too, as `_take` counts every other command
        if msg.offset in part.deadlettered:  # redelivered after a crash: its dead letter is there
            self.metrics.skipped.inc()
            return
        part.deadlettered.add(msg.offset)
        assert out.deadletter is not None
        self.metrics.deadletters.labels(out.deadletter["reason"]).inc()
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, part.partition, msg.offset, out.deadletter["detail"])
        value = self.codec.encode("spotreel.v1.DeadLetteredCommand", out.deadletter)
        outs.after_acks.append((commands_deadletter_topic(self.settings), msg.key, value, part.partition,
                                [(CMD_OFFSET_HEADER, str(msg.offset).encode())]))

    async def _take(self, part: PartitionState, msg: Any, out: HandlerResult, outs: _Outputs, given: Any,
                    started: int | None, via: str | None, entry: int | None, absorbed: list[Any] | None) -> None:
        """Send one judged command's events (each with its `cmd-offset` header, and `cmd-entry`, its place,
        for an entry of a RenewalBatch), answer it if it was absorbed (`absorbed`: the batch's absorbed
        renewals and refused requests, collected for its one RenewalReplies record instead), and note what the
        later phases write and answer."""
        p = part.partition
        producer = self.app.producer
        if out.pulse is not None:
            part.intake.pulse(out.pulse, clock.now_ms())
        self.metrics.commands.inc()
        traced = None
        if given or self.traces.by_job:  # the only per-command cost of tracing when nothing is traced
            traced = self.traces.on_command(given, out, p, msg.offset, started)
        if out.reply is not None:
            # Nothing durable to wait for: the deadline lives in memory, and a new owner grants a TTL.
            reply = out.reply
            if absorbed is not None:
                absorbed.append(reply)
            else:
                outs.replies.append(await producer.send(replies_topic(self.settings), reply.job_id.encode(),
                                                        self.codec.encode_message(reply), p, None, None))
            part.absorb(out.reply_to, (reply.epoch, reply.lease_expires_at_ms), reply)
            self.metrics.renewals_absorbed.inc()
        if out.events:
            headers = [(CMD_OFFSET_HEADER, str(msg.offset).encode())]
            if entry is not None:
                headers.append((CMD_ENTRY_HEADER, str(entry).encode()))
            if traced is not None:
                headers.append((TRACEPARENT, traced.encode()))
            for e in out.events:
                key = (getattr(e, "job_id", None) or e.schedule_id).encode()
                outs.sends.append((p, await producer.send(self.events, key, self.codec.encode_message(e), p, None,
                                                          headers)))
                if isinstance(e, (ev.CommandRejected, ev.ScheduleCommandRejected)):
                    self.metrics.rejections.labels(e.reason).inc()
                elif isinstance(e, ev.LeaseExpired):
                    self.metrics.observe_expiry(out.states[e.job_id][0], e)
            outs.marked.add(p)
        worker = getattr(out.command, "worker_id", None)
        if worker is not None:
            part.intake.came(worker, via)
        if worker is not None and not isinstance(out.command, RequestWork):
            part.seen_worker(worker, clock.now_ms(), free=isinstance(out.command, (CompleteJob, FailJob))
                             and not any(isinstance(e, ev.CommandRejected) for e in out.events))
        for e in out.events:
            if isinstance(e, ev.CheckpointRecorded):
                part.observe_checkpoint(out.states[e.job_id][1].pool, e.duration_ms)
            elif isinstance(e, ev.JobLeased):
                self.metrics.observe_lease(out.states[e.job_id][0], e)
            elif isinstance(e, (ev.LeaseExpired, ev.LeaseReleased)):
                self.metrics.observe_lease_end(out.states[e.job_id][0], e)
                if isinstance(e, ev.LeaseReleased) and e.reason == PREEMPTED_FOR:
                    part.freed[e.worker_id] = e.at_ms  # preempting.py: free until its next lease
            elif isinstance(e, ev.JobSucceeded):
                self.metrics.observe_success(out.states[e.job_id][1], e.at_ms)
        for before, after in out.states.values():
            self.metrics.observe_job(before, after)
            if after.is_terminal:
                self.metrics.forget(after.job_id)
            self.store.cache[after.job_id] = after
            outs.writes.append((p, after))
            part.observe(before, after)
        for before, sched in out.schedules.values():
            self.store.schedule_cache[sched.schedule_id] = sched
            outs.writes.append((p, sched))
            part.observe_schedule(before, sched)
        for command in out.followups:
            key = followups.key_of(command)
            outs.after_acks.append((self.commands, key.encode(), self.codec.encode_message(command),
                                    partition_for(key, self.settings.partitions)))
        if out.answer is not None:
            if absorbed is not None and isinstance(out.answer, ev.NoWorkAvailable):
                absorbed.append(out.answer)  # nothing durable behind a refusal: answered with the batch's replies
                if msg.timestamp:
                    outs.refused.append(msg.timestamp)
            else:
                outs.answers.append((out.answer, msg, traced))
            if isinstance(out.answer, ev.WorkAssigned):
                # Faust rereads the uncommitted tail after a rebalance: answer it from here again.
                part.remember_grant(out.answer.request_id,
                                    next(e for e in out.events if isinstance(e, ev.JobLeased)))
