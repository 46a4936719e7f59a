"""Commands that an accepted event obliges the owner to send to another aggregate (usually on another
partition): the DAG's watch/resolve handshake and cron's one SubmitJob per occurrence.

They are a pure function of (event, the aggregate's state after it), with deterministic command ids, so
sending one twice is harmless (the receiver refuses or ignores the duplicate). command_batches.py sends them after
the events are acknowledged and before the table's marker moves past those events; catch-up re-derives
them for every event past the marker, so a crash in between re-sends rather than loses them.

DAG handshake (no race whatever the order across partitions):
  child JobWaiting          -> WatchParent(parent, child)            to each pending parent's partition
  parent ParentWatched      -> ResolveParent(child, parent, status)  if the parent was already terminal
  parent reaches terminal   -> ResolveParent(child, parent, outcome) to every recorded watcher
  WatchParent, parent unknown (CommandRejected unknown_job, detail = child)
                            -> ResolveParent(child, parent, "cancelled")
The parent's partition orders the watch and the terminal event, so exactly one of the two answers it.

Cron: OccurrenceFired -> SubmitJob of its job (and, overlap_policy cancel_previous, CancelJob of the other
running occurrences' jobs); an occurrence's job reaching a terminal event -> EndOccurrence to its schedule.
"""

from __future__ import annotations

from typing import Any

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.schedules import ScheduleState, cancels_for, submit_for
from spotreel.domain.state import JobState, Status

_TERMINAL_EVENTS: dict[type, str] = {
    ev.JobSucceeded: Status.SUCCEEDED,
    ev.JobFailed: Status.FAILED,
    ev.JobCancelled: Status.CANCELLED,
    ev.JobDeadLettered: Status.DEAD_LETTERED,
}


def resolve(parent: str, child: str, outcome: str) -> cmd.ResolveParent:
    return cmd.ResolveParent(f"resolve:{parent}:{child}", child, parent, outcome)


def for_job_event(e: Any, state: JobState | None) -> list[Any]:
    if isinstance(e, ev.JobWaiting):
        return [cmd.WatchParent(f"watch:{e.job_id}:{p}", p, e.job_id) for p in e.pending_parents]
    if isinstance(e, ev.ParentWatched):
        return [resolve(e.job_id, e.child_id, e.status)] if e.status in Status.TERMINAL else []
    outcome = _TERMINAL_EVENTS.get(type(e))
    if outcome is not None and state is not None:
        return [resolve(e.job_id, child, outcome) for child in state.watchers] + ended_occurrence(e, state)
    if isinstance(e, ev.CommandRejected) and e.command_type == "WatchParent" and e.reason == "unknown_job":
        return [resolve(e.job_id, e.detail, Status.CANCELLED)] if e.detail else []
    return []


def for_schedule_event(e: Any, state: ScheduleState | None) -> list[Any]:
    if isinstance(e, ev.OccurrenceFired) and state is not None:
        return [submit_for(state, e), *cancels_for(state, e)]
    return []


def ended_occurrence(e: Any, state: JobState | None) -> list[Any]:
    """A job of a cron occurrence reached a terminal status: tell its schedule (overlap bookkeeping and the
    occurrence's outcome). The command id names the terminal event, so a re-derived one is the same command
    and the schedule refuses it (not_running)."""
    outcome = _TERMINAL_EVENTS.get(type(e))
    if outcome is None or state is None or state.schedule_id is None or state.occurrence_ms is None:
        return []
    return [cmd.EndOccurrence(f"ended:{e.job_id}:{e.version}", state.schedule_id, state.occurrence_ms, outcome)]


def key_of(command: Any) -> str:
    return getattr(command, "job_id", None) or command.schedule_id
