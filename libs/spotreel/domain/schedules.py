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

Time zone. The expression is read in the schedule's IANA zone (`cron.py` defines what a local time in a DST
gap or overlap means: once, at the first instant after the gap; once, at the first of the two).

Overlap. The state keeps `running`, the occurrences whose job has not reached a terminal status: an
occurrence joins it when it fires and leaves it when the job's partition reports the end (EndOccurrence,
sent by the scheduler when an occurrence's job has its terminal event; OccurrenceEnded records the
outcome). What an occurrence due while others are running does is the schedule's `overlap_policy`:
  allow            fire it anyway (several jobs of the schedule may run at once)
  skip             do not fire it: OccurrencesSkipped(reason="overlap") for it alone
  cancel_previous  fire it, and the scheduler cancels the running ones' jobs (CancelJob, reason "overlap",
                   sent for the newest fired occurrence; see `cancels_for`)
A job retried after it ended (RequeueJob) is not counted as running again.

Pause. PauseSchedule stops the timer; FireOccurrence is refused (schedule_paused) while paused.
ResumeSchedule skips what fell in the pause (OccurrencesSkipped(reason="paused"), never caught up) and
moves the window to the resume time. A deleted schedule refuses everything but EndOccurrence, so the
outcomes of jobs already fired are still recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spotreel.domain.records import replace
from typing import Any

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain import limits
from spotreel.domain.cron import CronError, CronSchedule, MissedPolicy, validate_zone
from spotreel.domain.cron import validate as validate_cron
from spotreel.domain.decide import submission_problem
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec

# The job template: fields shared, with the same meaning, by CreateSchedule, ScheduleCreated and SubmitJob,
# named flat as an occurrence's request hash and the projected template name them. The video's fields
# (SPEC_FIELDS) travel as one RenderSpec, `spec`, in all three records; the others are the records' own.
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
    "timeout_ms",
    "guidance_scale",
    "negative_prompt",
    "sampler",
)
# Added to the template later (schema v3 of CreateSchedule and ScheduleCreated), null when not set: the job has
# no time limit and renders with its model's defaults. They enter an occurrence's request hash and the
# projected template only where set, so the occurrences of a schedule created before them hash as they did (a
# firing replayed across the upgrade still reaches the same job as a no-op, not idempotency_key_reused).
LATER_TEMPLATE_FIELDS = ("timeout_ms", "guidance_scale", "negative_prompt", "sampler")


class OverlapPolicy:
    ALLOW = "allow"
    SKIP = "skip"
    CANCEL_PREVIOUS = "cancel_previous"
    ALL = (ALLOW, SKIP, CANCEL_PREVIOUS)


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
    paused: bool = False
    running: tuple[int, ...] = ()  # fired occurrences whose job has not ended, ascending

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
    SCHEDULE_PAUSED = "schedule_paused"
    ALREADY_PAUSED = "already_paused"
    NOT_PAUSED = "not_paused"
    NOT_RUNNING = "not_running"


# The template's fields a schedule record carries beside its `spec`.
JOB_FIELDS = tuple(name for name in TEMPLATE_FIELDS if name not in SPEC_FIELDS)


def _template(source: Any) -> dict[str, Any]:
    """The template flat, every field by name (the spec's fields among them)."""
    flat = source.spec.flat()
    return {name: flat[name] if name in SPEC_FIELDS else getattr(source, name) for name in TEMPLATE_FIELDS}


def _submit_template(source: Any) -> dict[str, Any]:
    """The template as the arguments of the record it goes into (SubmitJob, ScheduleCreated): the spec
    whole, the other fields by name."""
    spec: RenderSpec = source.spec
    return {"spec": spec, **{name: getattr(source, name) for name in JOB_FIELDS}}


def template_body(source: Any) -> dict[str, Any]:
    """The template as hashed and projected: every field, those of LATER_TEMPLATE_FIELDS only where set."""
    return {name: value for name, value in _template(source).items()
            if value is not None or name not in LATER_TEMPLATE_FIELDS}


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
    template = _submit_template(state.created)
    body = {**template_body(state.created), "schedule_id": state.schedule_id, "occurrence_ms": fired.occurrence_ms}
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


def cancels_for(state: ScheduleState | None, fired: ev.OccurrenceFired) -> list[cmd.CancelJob]:
    """cancel_previous: the CancelJob commands the newest fired occurrence obliges, one per other running
    occurrence's job. Only the newest fired does it, so a catch-up that fires several at once cancels
    each earlier job once. Deterministic command ids, so sending them twice is harmless."""
    if state is None or state.created.overlap_policy != OverlapPolicy.CANCEL_PREVIOUS:
        return []
    if not state.running or fired.occurrence_ms != state.running[-1]:
        return []
    return [cmd.CancelJob(f"overlap:{state.schedule_id}:{o}", ids.job_id_for_occurrence(state.tenant, state.schedule_id, o),
                          reason="overlap")
            for o in state.running[:-1]]


def decide_schedule(state: ScheduleState | None, command: object, now_ms: int) -> tuple[Any, ...]:
    match command:
        case cmd.CreateSchedule():
            return _numbered(state, _create(state, command, now_ms))
        case _ if state is None and isinstance(command, cmd.SCHEDULE_COMMANDS):
            return _rejected(state, command, now_ms, ScheduleReason.UNKNOWN_SCHEDULE)
        case cmd.EndOccurrence():
            assert state is not None
            return _numbered(state, _end(state, command, now_ms))
        case _ if state is not None and state.deleted and isinstance(command, cmd.SCHEDULE_COMMANDS):
            return _rejected(state, command, now_ms, ScheduleReason.SCHEDULE_DELETED)
        case cmd.DeleteSchedule():
            return _numbered(state, (ev.ScheduleDeleted(**_head(command, now_ms)),))
        case cmd.PauseSchedule():
            assert state is not None
            if state.paused:
                return _rejected(state, command, now_ms, ScheduleReason.ALREADY_PAUSED)
            return _numbered(state, (ev.SchedulePaused(**_head(command, now_ms)),))
        case cmd.ResumeSchedule():
            assert state is not None
            if not state.paused:
                return _rejected(state, command, now_ms, ScheduleReason.NOT_PAUSED)
            return _numbered(state, _resume(state, command, now_ms))
        case cmd.FireOccurrence():
            assert state is not None
            if state.paused:
                return _rejected(state, command, now_ms, ScheduleReason.SCHEDULE_PAUSED)
            return _numbered(state, _fire(state, command, now_ms))
    return _rejected(state, command, now_ms, ScheduleReason.UNKNOWN_COMMAND)


def _end(state: ScheduleState, c: cmd.EndOccurrence, now_ms: int) -> tuple[Any, ...]:
    if c.occurrence_ms not in state.running:
        return _rejected(state, c, now_ms, ScheduleReason.NOT_RUNNING, str(c.occurrence_ms))
    job_id = ids.job_id_for_occurrence(state.tenant, state.schedule_id, c.occurrence_ms)
    return (ev.OccurrenceEnded(**_head(c, now_ms), occurrence_ms=c.occurrence_ms, job_id=job_id, outcome=c.outcome),)


def _schedule(state: ScheduleState) -> CronSchedule:
    return CronSchedule(state.created.cron, state.created.timezone)


def _resume(state: ScheduleState, c: cmd.ResumeSchedule, now_ms: int) -> tuple[Any, ...]:
    try:
        schedule = _schedule(state)
        first = schedule.next_after(state.last_tick_ms)
        following = schedule.next_after(now_ms)
    except (CronError, ValueError, OverflowError) as err:
        return _rejected(state, c, now_ms, ScheduleReason.CRON_ERROR, str(err))
    out: list[Any] = []
    if first <= now_ms:
        out.append(ev.OccurrencesSkipped(**_head(c, now_ms), first_occurrence_ms=first,
                                         last_occurrence_ms=schedule.latest_at_or_before(now_ms), reason="paused"))
    out.append(ev.ScheduleResumed(**_head(c, now_ms), through_ms=now_ms, next_occurrence_ms=following))
    return tuple(out)


def _create_problem(c: cmd.CreateSchedule) -> str | None:
    if not c.schedule_id or not c.tenant:
        return "schedule_id and tenant are required"
    try:
        validate_zone(c.timezone)
    except CronError as err:
        return str(err)
    if c.overlap_policy not in OverlapPolicy.ALL:
        return f"overlap_policy must be one of {list(OverlapPolicy.ALL)}"
    if c.missed_policy not in {p.value for p in MissedPolicy}:
        return f"missed_policy must be one of {sorted(p.value for p in MissedPolicy)}"
    if c.grace_ms < 0 or c.max_catchup < 1:
        return "grace_ms must be >= 0 and max_catchup >= 1"
    if c.start_ms is not None and not 0 <= c.start_ms <= limits.MAX_TIME_MS:
        return f"start_ms must be from 0 to {limits.MAX_TIME_MS} (the end of year 9999)"
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
        **_submit_template(c),
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
        first = CronSchedule(cron, c.timezone).next_after(last_tick)
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
        **_submit_template(c),
        overlap_policy=c.overlap_policy,
    )
    advanced = ev.ScheduleAdvanced(
        **_head(c, now_ms), through_ms=last_tick, next_occurrence_ms=created.next_occurrence_ms
    )
    return created, advanced


def _fire(state: ScheduleState, c: cmd.FireOccurrence, now_ms: int) -> tuple[Any, ...]:
    if now_ms < state.next_occurrence_ms:
        return _rejected(state, c, now_ms, ScheduleReason.NOT_DUE, f"next occurrence at {state.next_occurrence_ms}")
    try:
        schedule = _schedule(state)
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
    running = bool(state.running)
    for occurrence in tick.fire:
        if running and state.created.overlap_policy == OverlapPolicy.SKIP:
            out.append(ev.OccurrencesSkipped(**_head(c, now_ms), first_occurrence_ms=occurrence,
                                             last_occurrence_ms=occurrence, reason="overlap"))
            continue
        running = True
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
            state = replace(state, fired=state.fired + 1, last_fired_occurrence_ms=event.occurrence_ms,
                            running=tuple(sorted({*state.running, event.occurrence_ms})))
        case ev.OccurrenceEnded():
            state = replace(state, running=tuple(o for o in state.running if o != event.occurrence_ms))
        case ev.ScheduleDeleted():
            state = replace(state, deleted=True)
        case ev.SchedulePaused():
            state = replace(state, paused=True)
        case ev.ScheduleResumed():
            state = replace(state, paused=False, last_tick_ms=event.through_ms,
                            next_occurrence_ms=event.next_occurrence_ms)
        case ev.OccurrencesSkipped():
            pass
        case _:
            return state
    return replace(state, version=event.version)


def fold_schedule(events: Iterable[object], state: ScheduleState | None = None) -> ScheduleState | None:
    for event in events:
        state = evolve_schedule(state, event)
    return state

