"""The cron schedule aggregate: decide, evolve and fold for one schedule, keyed by schedule_id.

A schedule never runs anything itself. Each due occurrence becomes an OccurrenceFired event naming the job
that must exist for it; the scheduler turns that into a SubmitJob (`submit_for`) whose job id and request
hash are functions of (tenant, schedule_id, occurrence_ms) and the template. Firing the same occurrence
twice (a replayed timer, a partition moving mid-tick) therefore reaches the same job and its submission is
a no-op: one job per occurrence.

Timing. The state remembers `last_tick_ms`, the end of the window already dealt with. FireOccurrence at
`now_ms` looks at the window (last_tick_ms, now_ms] through `cron.CronSchedule.tick`, which applies the
missed-occurrence policy:
  skip      fire the latest occurrence only if it is within `grace_ms` of now; older ones are skipped
  run_once  fire the latest occurrence of the window, skip the rest (missed runs coalesce into one)
  run_all   fire every occurrence of the window, at most `max_catchup` (the latest ones), skip the rest
Skipped occurrences are recorded as one OccurrencesSkipped range. A FireOccurrence before the next
occurrence is due is rejected (not_due) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.cron import CronError, CronSchedule, MissedPolicy
from spotreel.domain.cron import validate as validate_cron
from spotreel.domain.decide import submission_problem

# The job template: fields shared, with the same meaning, by CreateSchedule, ScheduleCreated and SubmitJob.
TEMPLATE_FIELDS = (
    "model",
    "gpu_type",
    "prompt",
    "duration_s",
    "resolution",
    "fps",
    "seed",
    "num_steps",
    "priority",
    "callback_url",
    "max_attempts",
    "max_preemptions",
    "keep_checkpoints",
    "backoff_base_ms",
    "backoff_max_ms",
    "poison_threshold",
    "poison_window_ms",
)


@dataclass(frozen=True)
class ScheduleState:
    schedule_id: str
    version: int
    created: ev.ScheduleCreated
    last_tick_ms: int
    next_occurrence_ms: int
    deleted: bool = False
    fired: int = 0
    last_fired_occurrence_ms: int | None = None

    @property
    def tenant(self) -> str:
        return self.created.tenant


class ScheduleReason:
    UNKNOWN_SCHEDULE = "unknown_schedule"
    SCHEDULE_EXISTS = "schedule_exists"
    SCHEDULE_DELETED = "schedule_deleted"
    INVALID_REQUEST = "invalid_request"
    NOT_DUE = "not_due"
    CRON_ERROR = "cron_error"
    UNKNOWN_COMMAND = "unknown_command"


def _template(source: Any) -> dict[str, Any]:
    return {name: getattr(source, name) for name in TEMPLATE_FIELDS}


def _rejected(state: ScheduleState | None, c: Any, now_ms: int, reason: str, detail: str = "") -> tuple[Any]:
    return (
        ev.ScheduleCommandRejected(
            schedule_id=str(getattr(c, "schedule_id", "")),
            version=state.version if state is not None else 0,
            at_ms=now_ms,
            causation_id=str(getattr(c, "command_id", "")),
            command_id=str(getattr(c, "command_id", "")),
            command_type=type(c).__name__,
            reason=reason,
            detail=detail,
        ),
    )


def _numbered(state: ScheduleState | None, events: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(events) == 1 and isinstance(events[0], ev.ScheduleCommandRejected):
        return events
    base = state.version if state is not None else 0
    return tuple(replace(e, version=base + i) for i, e in enumerate(events, start=1))


def _head(c: Any, now_ms: int) -> dict[str, Any]:
    return {"schedule_id": c.schedule_id, "version": 0, "at_ms": now_ms, "causation_id": c.command_id}


def submit_for(state: ScheduleState, fired: ev.OccurrenceFired) -> cmd.SubmitJob:
    """The SubmitJob for one fired occurrence. Deterministic, so producing it twice is harmless."""
    template = _template(state.created)
    body = {**template, "schedule_id": state.schedule_id, "occurrence_ms": fired.occurrence_ms}
    return cmd.SubmitJob(
        command_id=f"{state.schedule_id}:{fired.occurrence_ms}",
        job_id=fired.job_id,
        tenant=state.tenant,
        idempotency_key=fired.idempotency_key,
        request_hash=ids.request_hash(body),
        schedule_id=state.schedule_id,
        occurrence_ms=fired.occurrence_ms,
        **template,
    )


def decide_schedule(state: ScheduleState | None, command: object, now_ms: int) -> tuple[Any, ...]:
    match command:
        case cmd.CreateSchedule():
            return _numbered(state, _create(state, command, now_ms))
        case cmd.DeleteSchedule() | cmd.FireOccurrence() if state is None:
            return _rejected(state, command, now_ms, ScheduleReason.UNKNOWN_SCHEDULE)
        case cmd.DeleteSchedule() | cmd.FireOccurrence() if state is not None and state.deleted:
            return _rejected(state, command, now_ms, ScheduleReason.SCHEDULE_DELETED)
        case cmd.DeleteSchedule():
            return _numbered(state, (ev.ScheduleDeleted(**_head(command, now_ms)),))
        case cmd.FireOccurrence():
            assert state is not None
            return _numbered(state, _fire(state, command, now_ms))
    return _rejected(state, command, now_ms, ScheduleReason.UNKNOWN_COMMAND)


def _create_problem(c: cmd.CreateSchedule) -> str | None:
    if not c.schedule_id or not c.tenant:
        return "schedule_id and tenant are required"
    if c.timezone != "UTC":
        return "timezone must be UTC"
    if c.missed_policy not in {p.value for p in MissedPolicy}:
        return f"missed_policy must be one of {sorted(p.value for p in MissedPolicy)}"
    if c.grace_ms < 0 or c.max_catchup < 1:
        return "grace_ms must be >= 0 and max_catchup >= 1"
    try:
        validate_cron(c.cron)
    except CronError as err:
        return str(err)
    probe = cmd.SubmitJob(
        command_id=c.command_id,
        job_id="",
        tenant=c.tenant,
        idempotency_key=c.schedule_id,
        request_hash="",
        **_template(c),
    )
    return submission_problem(probe)


def _create(state: ScheduleState | None, c: cmd.CreateSchedule, now_ms: int) -> tuple[Any, ...]:
    if state is not None:
        return _rejected(state, c, now_ms, ScheduleReason.SCHEDULE_EXISTS)
    problem = _create_problem(c)
    if problem is not None:
        return _rejected(state, c, now_ms, ScheduleReason.INVALID_REQUEST, problem)
    cron = validate_cron(c.cron)
    # The window is (last_tick_ms, now]; starting it just before start_ms makes an occurrence exactly at
    # start_ms count.
    last_tick = c.start_ms - 1 if c.start_ms is not None else now_ms
    try:
        first = CronSchedule(cron).next_after(last_tick)
    except (CronError, ValueError, OverflowError) as err:
        return _rejected(state, c, now_ms, ScheduleReason.INVALID_REQUEST, f"start_ms out of range: {err}")
    created = ev.ScheduleCreated(
        **_head(c, now_ms),
        tenant=c.tenant,
        cron=cron,
        timezone=c.timezone,
        missed_policy=c.missed_policy,
        grace_ms=c.grace_ms,
        max_catchup=c.max_catchup,
        next_occurrence_ms=first,
        **_template(c),
    )
    advanced = ev.ScheduleAdvanced(
        **_head(c, now_ms), through_ms=last_tick, next_occurrence_ms=created.next_occurrence_ms
    )
    return created, advanced


def _fire(state: ScheduleState, c: cmd.FireOccurrence, now_ms: int) -> tuple[Any, ...]:
    if now_ms < state.next_occurrence_ms:
        return _rejected(state, c, now_ms, ScheduleReason.NOT_DUE, f"next occurrence at {state.next_occurrence_ms}")
    try:
        schedule = CronSchedule(state.created.cron)
        tick = schedule.tick(
            state.last_tick_ms, now_ms, state.created.missed_policy, state.created.grace_ms, state.created.max_catchup
        )
    except (CronError, ValueError, OverflowError) as err:
        return _rejected(state, c, now_ms, ScheduleReason.CRON_ERROR, str(err))
    out: list[Any] = []
    if tick.dropped:
        first = schedule.next_after(state.last_tick_ms)
        last = schedule.latest_at_or_before(tick.fire[0] - 1 if tick.fire else now_ms)
        out.append(ev.OccurrencesSkipped(**_head(c, now_ms), first_occurrence_ms=first, last_occurrence_ms=last))
    for occurrence in tick.fire:
        key = ids.occurrence_idempotency_key(state.schedule_id, occurrence)
        out.append(
            ev.OccurrenceFired(
                **_head(c, now_ms),
                occurrence_ms=occurrence,
                job_id=ids.job_id_for(state.tenant, key),
                idempotency_key=key,
                late=now_ms - occurrence > state.created.grace_ms,
            )
        )
    out.append(ev.ScheduleAdvanced(**_head(c, now_ms), through_ms=now_ms, next_occurrence_ms=tick.next_ms))
    return tuple(out)


def evolve_schedule(state: ScheduleState | None, event: object) -> ScheduleState | None:
    """Trusts the event, like the job's evolve."""
    if isinstance(event, ev.ScheduleCreated):
        return ScheduleState(
            schedule_id=event.schedule_id,
            version=event.version,
            created=event,
            last_tick_ms=event.at_ms,
            next_occurrence_ms=event.next_occurrence_ms,
        )
    if state is None or isinstance(event, ev.ScheduleCommandRejected):
        return state
    match event:
        case ev.ScheduleAdvanced():
            state = replace(state, last_tick_ms=event.through_ms, next_occurrence_ms=event.next_occurrence_ms)
        case ev.OccurrenceFired():
            state = replace(state, fired=state.fired + 1, last_fired_occurrence_ms=event.occurrence_ms)
        case ev.ScheduleDeleted():
            state = replace(state, deleted=True)
        case ev.OccurrencesSkipped():
            pass
        case _:
            return state
    return replace(state, version=event.version)  # type: ignore[attr-defined]


def fold_schedule(events: Iterable[object], state: ScheduleState | None = None) -> ScheduleState | None:
    for event in events:
        state = evolve_schedule(state, event)
    return state

