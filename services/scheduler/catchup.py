"""Make the table agree with the events topic for a partition just assigned (the table may lag the events
topic after a crash: events are written before the table's changelog). Blocking; run it in a thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spotreel.platform.consumers import consumer
from spotreel.adapters.kafka import read_partition
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.schedules import ScheduleState, evolve_schedule
from spotreel.domain.state import JobState

from spotreel.services.scheduler import followups
from spotreel.services.scheduler.redelivery import header_entry, header_offset, window_start

log = logging.getLogger(__name__)


@dataclass
class CatchUp:
    applied_upto: int = -1
    # The `cmd-entry` of the last event when its command is a RenewalBatch torn by a crash (partition.py).
    applied_entry: int | None = None
    events_offset: int = -1
    states: dict[str, JobState] = field(default_factory=dict)
    schedules: dict[str, ScheduleState] = field(default_factory=dict)
    # Follow-up commands of the events past the marker: they may not have been sent (see followups.py).
    followups: list[Any] = field(default_factory=list)
    schedule_pending: list[Any] = field(default_factory=list)
    read: int = 0
    # RequestWork id -> the JobLeased it produced, for the commands Kafka will redeliver (offset >= the
    # group's committed offset): a skipped RequestWork is answered again from it (redelivery.py).
    grants: dict[str, ev.JobLeased] = field(default_factory=dict)


def catch_up(bootstrap: str, topic: str, partition: int, codec: Codec, marker: int,
             get: Callable[[str], JobState | None],
             get_schedule: Callable[[str], ScheduleState | None] = lambda _: None,
             committed: int | None = None) -> CatchUp:
    """Fold the events past `marker` into the table's states. With `committed` (the commands partition's
    committed offset), also read back over the events of every command that will be redelivered, for
    the grants they hold (events at or below the marker are already in the table and are not folded)."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, "spotreel-catchup")
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()
    result = CatchUp(events_offset=marker)
    pending: list[Any] = []
    schedule_pending = result.schedule_pending
    if high == 0:
        return result
    # Always read the last event too: its header says which command was applied last.
    start = min(marker + 1, high - 1)
    if committed is not None:
        start = window_start(bootstrap, topic, partition, committed, start)
    for msg in read_partition(bootstrap, topic, partition, start, high):
        result.read += 1
        offset = note_applied(result, msg.headers())
        result.events_offset = max(result.events_offset, msg.offset())
        event = codec.decode_message(msg.value())
        if (isinstance(event, ev.JobLeased) and event.causation_id.startswith("rw:") and committed is not None
                and offset is not None and offset >= committed):
            result.grants[event.causation_id[3:]] = event
        if isinstance(event, ev.SCHEDULE_EVENTS):
            _schedule_event(result, event, get_schedule)
            continue
        if isinstance(event, ev.CommandRejected):
            if msg.offset() > marker:
                result.followups.extend(followups.for_job_event(event, None))
            continue
        if not hasattr(event, "version"):
            continue
        state = result.states.get(event.job_id) or get(event.job_id)
        if isinstance(event, ev.JobSubmitted):
            if state is not None:
                continue
        elif state is None or event.version <= state.version:
            continue
        elif event.version != state.version + 1:
            log.error("events of %s jump from v%d to v%d", event.job_id, state.version, event.version)
        result.states[event.job_id] = evolve(state, event)
        pending.append(event)
    # With the final states: a terminal event's watchers may have grown later in the tail (a superset is
    # harmless, every resolve is idempotent).
    for event in pending:
        result.followups.extend(followups.for_job_event(event, result.states.get(event.job_id)))
    for event in schedule_pending:
        result.followups.extend(followups.for_schedule_event(event, result.schedules.get(event.schedule_id)))
    return result


def note_applied(result: CatchUp, headers: Any) -> int | None:
    """Fold one event's `cmd-offset` (and `cmd-entry`) headers into what is applied; the event's command offset.
    Events come in log order, so the last command's renewals up to the highest place seen are applied."""
    offset = header_offset(headers)
    if offset is None:
        return None
    entry = header_entry(headers)
    if offset > result.applied_upto:
        result.applied_upto, result.applied_entry = offset, entry
    elif offset == result.applied_upto and result.applied_entry is not None:
        result.applied_entry = None if entry is None else max(result.applied_entry, entry)
    return offset


def _schedule_event(result: CatchUp, event: Any, get_schedule: Callable[[str], ScheduleState | None]) -> None:
    if isinstance(event, ev.ScheduleCommandRejected):
        return
    state = result.schedules.get(event.schedule_id) or get_schedule(event.schedule_id)
    if isinstance(event, ev.ScheduleCreated):
        if state is not None:
            return
    elif state is None or event.version <= state.version:
        return
    result.schedules[event.schedule_id] = evolve_schedule(state, event)
    result.schedule_pending.append(event)
