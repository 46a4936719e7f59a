"""Which timer a job or schedule needs, derived from its state, and the command to send when it fires.

The partition owner keeps timer heaps (DESIGN §3) but never decides anything from them: when a timer fires
it sends the command below and `decide` judges it against the state at that moment. Timers are therefore
hints that may be stale (a renewal moved the expiry, a pause made the run_at moot); a stale one is refused
with a recorded reason and the owner re-arms from `timers_for(state)`. After a rebalance the heaps are
rebuilt by calling `timers_for` on every job of the partition.

Command ids of timer commands are deterministic, so a timer that fires twice (a crash between sending and
recording) produces the same command twice and the second is refused like any duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain import commands as cmd
from spotreel.domain import limits
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.state import JobState, Status


class TimerKind:
    EXPIRE_LEASE = "expire_lease"
    # The job's rendering time is used up / its step stopped advancing (limits.py): both are ExpireLease
    # commands with that rule, judged like the lease expiry.
    TIMEOUT = "timeout"
    STUCK = "stuck"
    ACTIVATE = "activate"
    FIRE_OCCURRENCE = "fire_occurrence"


@dataclass(frozen=True)
class Timer:
    kind: str
    key: str  # job_id, or schedule_id for FIRE_OCCURRENCE
    at_ms: int
    epoch: int | None = None

    def command(self) -> cmd.ExpireLease | cmd.ActivateJob | cmd.FireOccurrence:
        suffix = f"e{self.epoch}@{self.at_ms}" if self.epoch is not None else str(self.at_ms)
        command_id = f"timer:{self.kind}:{self.key}:{suffix}"
        if self.kind == TimerKind.EXPIRE_LEASE:
            return cmd.ExpireLease(command_id, self.key, self.epoch or 0)
        if self.kind in (TimerKind.TIMEOUT, TimerKind.STUCK):
            return cmd.ExpireLease(command_id, self.key, self.epoch or 0, rule=self.kind)
        if self.kind == TimerKind.ACTIVATE:
            return cmd.ActivateJob(command_id, self.key)
        return cmd.FireOccurrence(command_id, self.key)


def timers_for(state: JobState | None) -> tuple[Timer, ...]:
    if state is None:
        return ()
    if state.lease is not None and state.status in Status.HOLDING_LEASE:
        epoch = state.lease.epoch
        out = [Timer(TimerKind.EXPIRE_LEASE, state.job_id, state.lease.expires_at_ms, epoch)]
        for kind, at in ((TimerKind.TIMEOUT, limits.timeout_at(state)), (TimerKind.STUCK, limits.stuck_at(state))):
            if at is not None:
                out.append(Timer(kind, state.job_id, at, epoch))
        return tuple(out)
    if state.status == Status.SCHEDULED and state.run_at_ms is not None:
        return (Timer(TimerKind.ACTIVATE, state.job_id, state.run_at_ms),)
    return ()


def schedule_timers(state: ScheduleState | None) -> tuple[Timer, ...]:
    if state is None or state.deleted or state.paused:
        return ()
    return (Timer(TimerKind.FIRE_OCCURRENCE, state.schedule_id, state.next_occurrence_ms),)
