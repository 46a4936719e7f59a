"""Properties of the job core under random command sequences.

A hypothesis state machine plays scheduler, workers, timers and users at once: the clock moves forward by
random amounts, commands carry current, stale or invented epochs, old commands are delivered again
(duplicates and reordering). After every step the invariants of DESIGN §2 are checked on what `decide`
returned and on the folded state.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import typing
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.leases import UNCLAIMED
from spotreel.domain.evolve import evolve, fold
from spotreel.domain.state import JobState, Status
from tests.unit.jobkit import POOL, T0, submit
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

WORKERS = ("w1", "w2", "w3")
PARENTS = ("p1", "p2")
LEASE_ENDS = (ev.LeaseExpired, ev.LeaseReleased, ev.AttemptFailed, ev.JobSucceeded)
# Weighted towards the current lease so that runs get deep into the lifecycle, yet every run also sees
# stale, invented and zero epochs and intruding workers.
EPOCH_CHOICE = st.sampled_from(("current",) * 6 + ("stale", "future", "zero"))
WHO = st.sampled_from((("current", "holder"),) * 8 + (("stale", "holder"), ("future", "holder"), ("zero", "holder"),
                       ("current", "other")))


class JobMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state: JobState | None = None
        self.now = T0
        self.history: list[Any] = []
        self.sent: list[Any] = []
        self.counter = 0
        self.job_id = ""
        self.max_epoch_seen = 0
        self.high_water = 0.0

    # --- plumbing -----------------------------------------------------------------------------------------

    def _id(self) -> str:
        self.counter += 1
        return f"c{self.counter}"

    def send(self, command: Any) -> tuple[Any, ...]:
        before = self.state
        out = decide(before, command, self.now)  # must never raise
        assert isinstance(out, tuple)
        self.sent.append(command)
        rejected = len(out) == 1 and isinstance(out[0], ev.CommandRejected)
        if rejected:
            rej = out[0]
            assert rej.causation_id == rej.command_id == command.command_id
            assert rej.version == (before.version if before else 0)
        for e in out:
            assert not isinstance(e, ev.CommandRejected) or rejected, "a rejection is always alone"
        self._check_decision(before, command, out, rejected)
        for e in out:
            self.state = evolve(self.state, e)
            hypothesis.event(type(e).__name__ if not rejected else f"rejected: {e.reason}")
        if rejected:
            assert self.state == before, "a rejection never changes state"
        else:
            self.history.extend(out)
        return out

    def _check_decision(self, before: JobState | None, command: Any, out: tuple[Any, ...], rejected: bool) -> None:
        if rejected or not out:
            if before is not None and not out:
                assert isinstance(command, c.SubmitJob), "only a repeated submission is a silent no-op"
            return
        base = before.version if before else 0
        assert [e.version for e in out] == list(range(base + 1, base + 1 + len(out)))
        assert all(e.at_ms == self.now and e.causation_id == command.command_id for e in out)
        if before is not None and before.is_terminal:
            assert isinstance(command, c.RequeueJob) and before.status in Status.REQUEUEABLE
            assert [type(e) for e in out] == [ev.JobRequeued]
        if isinstance(command, c.WORKER_COMMANDS) or isinstance(command, c.ExpireLease):
            # Fencing: only the current, live lease's epoch is ever accepted.
            assert before is not None and before.lease is not None
            assert command.epoch == before.lease.epoch == before.epoch
            if isinstance(command, c.WORKER_COMMANDS):
                assert command.worker_id == before.lease.worker_id
                assert self.now < before.lease.expires_at_ms, "a lease is dead once the owner's clock passes it"
            else:
                assert self.now >= before.lease.expires_at_ms
        kinds = {type(e) for e in out}
        if kinds & {ev.LeaseExpired, ev.LeaseReleased}:
            assert before is not None
            after = fold(out, before)
            assert after is not None and after.attempts_used == before.attempts_used, "preemption used an attempt"
        if isinstance(command, c.ReleaseLease) and command.reason == UNCLAIMED:
            # Only a lease nobody acted on is unclaimed, and handing it back costs the job nothing.
            assert before is not None and before.lease is not None and not before.lease.confirmed
            after = fold(out, before)
            assert after is not None and after.preemptions == before.preemptions
            assert after.status in (Status.QUEUED, Status.CANCELLED, Status.PAUSED)
        for e in out:
            if isinstance(e, ev.JobLeased):
                assert e.epoch > self.max_epoch_seen, "epochs strictly increase and are never reused"
                self.max_epoch_seen = e.epoch
            if isinstance(e, ev.JobDeadLettered) and e.reason == "max_attempts":
                assert ev.AttemptFailed in kinds

    # --- rules --------------------------------------------------------------------------------------------
    # Each rule draws as little as possible (one or two values) because hypothesis' per-draw cost, not the
    # domain, dominates the run time; the values are spread over the command's fields deterministically.

    @initialize(
        n=st.integers(0, 10**6),
        parents=st.sampled_from(((),) * 8 + (("p1",), PARENTS)),
        lease_at_once=st.sampled_from((True, True, False)),
    )
    def submit_job(self, n: int, parents: tuple, lease_at_once: bool) -> None:
        run_at = (None, None, None, T0 - 10_000, T0 + 20_000, T0 + 120_000)[n % 6]
        cmd = submit(
            max_attempts=1 + n % 4,
            max_preemptions=1 + n % 7,
            keep_checkpoints=1 + n % 3,
            parents=parents,
            dag_policy=("fail_fast", "continue")[n % 2],
            run_at_ms=run_at,
            poison_threshold=2 + n % 5 % 3,
            backoff_base_ms=1_000,
            backoff_max_ms=20_000,
        )
        self.job_id = cmd.job_id
        out = self.send(cmd)
        assert [type(e) for e in out][0] is ev.JobSubmitted
        if lease_at_once and self.state is not None and self.state.status == Status.QUEUED:
            self.send(c.GrantLease(self._id(), self.job_id, "w1", POOL, 30_000))

    # Boundaries of the 30 s lease used most often are among the steps.
    @rule(dt=st.sampled_from((0, 1, 1_000, 4_000, 10_000, 29_999, 30_000, 45_000, 90_000)))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule(n=st.integers(0, 59))
    def grant(self, n: int) -> None:
        pool = POOL if n % 6 else "other@a100"
        ttl = (30_000, 60_000, 10_000, 1)[n % 4]
        self.send(c.GrantLease(self._id(), self.job_id, WORKERS[n % 3], pool, ttl))

    def _epoch(self, choice: str) -> int:
        current = self.state.epoch if self.state else 0
        return {"current": current, "stale": max(0, current - 1), "future": current + 1, "zero": 0}[choice]

    def _worker(self, choice: str) -> str:
        lease = self.state.lease if self.state else None
        return lease.worker_id if (lease and choice == "holder") else "intruder"

    def _worker_command(self, kind: str, who: tuple[str, str], n: int) -> None:
        e, w, i, j = self._epoch(who[0]), self._worker(who[1]), self._id(), self.job_id
        step, pct = n - 1, n * 1.7 - 3.0  # strays below 0 and above 100 at the edges
        cmd: Any = {
            "renew": lambda: c.RenewLease(i, j, e, w),
            "progress": lambda: c.ReportProgress(i, j, e, w, step, pct),
            "checkpoint": lambda: c.RecordCheckpoint(i, j, e, w, ids.checkpoint_key(j, e, step), step, pct, "s", 1),
            "complete": lambda: c.CompleteJob(i, j, e, w, ids.artifact_key(j, e), "s", 1),
            "fail": lambda: c.FailJob(i, j, e, w, "err", "msg", n % 4 != 0),
            "release": lambda: c.ReleaseLease(i, j, e, w),
            "unclaimed": lambda: c.ReleaseLease(i, j, e, w, UNCLAIMED),
        }[kind]
        out = self.send(cmd())
        if kind == "unclaimed" and len(out) == 1 and isinstance(out[0], ev.CommandRejected):
            if out[0].reason == "lease_in_use":
                assert self.state is not None and self.state.lease is not None and self.state.lease.confirmed

    # Worker traffic dominates a real job's history, so it has two rules (twice the share of steps).
    @rule(kind=st.sampled_from(("renew", "progress", "checkpoint")), who=WHO, n=st.integers(0, 62))
    def worker_reports(self, kind: str, who: tuple[str, str], n: int) -> None:
        self._worker_command(kind, who, n)

    @rule(kind=st.sampled_from(("complete", "fail", "release", "progress", "unclaimed")), who=WHO,
          n=st.integers(0, 62))
    def worker_ends(self, kind: str, who: tuple[str, str], n: int) -> None:
        self._worker_command(kind, who, n)

    @rule(epoch=EPOCH_CHOICE)
    def expire(self, epoch: str) -> None:
        self.send(c.ExpireLease(self._id(), self.job_id, self._epoch(epoch)))

    @rule(
        kind=st.sampled_from(("cancel", "pause", "resume", "requeue", "activate", "reprioritize", "parent", "resubmit")),
        n=st.integers(0, 23),
    )
    def user_or_timer(self, kind: str, n: int) -> None:
        i, j = self._id(), self.job_id
        if kind == "resubmit":
            self._resubmit(same_body=n % 2 == 0)
            return
        parent = (*PARENTS, "stranger")[n % 3]
        outcome = sorted(Status.TERMINAL)[n % 4]
        cmd = {
            "cancel": lambda: c.CancelJob(i, j),
            "pause": lambda: c.PauseJob(i, j),
            "resume": lambda: c.ResumeJob(i, j),
            "requeue": lambda: c.RequeueJob(i, j),
            "activate": lambda: c.ActivateJob(i, j),
            "reprioritize": lambda: c.Reprioritize(i, j, n % 5 - 2),
            "parent": lambda: c.ResolveParent(i, j, parent, outcome),
        }[kind]
        self.send(cmd())

    def _resubmit(self, same_body: bool) -> None:
        assert self.state is not None
        cmd = submit(request_hash=self.state.request_hash if same_body else "different", command_id=self._id())
        out = self.send(cmd)
        if same_body:
            assert out == ()
        else:
            assert out[0].reason == "idempotency_key_reused"

    @rule(back=st.integers(1, 40))
    def redeliver(self, back: int) -> None:
        """An old command arrives again (Kafka redelivery, a slow worker, a reordered partition)."""
        old = self.sent[-min(back, len(self.sent))]
        if isinstance(old, c.SubmitJob) and old.request_hash == "different":
            return
        self.send(old)

    # --- invariants ---------------------------------------------------------------------------------------

    # One invariant method: hypothesis' bookkeeping per invariant per step costs more than the checks.
    @invariant()
    def job_invariants(self) -> None:
        s = self.state
        if s is None:
            return
        # At most one valid lease: the state holds at most one, exactly while leased/running...
        assert (s.lease is not None) == (s.status in Status.HOLDING_LEASE)
        assert s.lease is None or s.lease.epoch == s.epoch
        assert s.status != Status.SUBMITTED
        # ...and the history never grants a lease before the previous one ended.
        open_lease = False
        heard = False  # the current lease's holder has acted on it
        succeeded = 0
        for version, e in enumerate(self.history, start=1):
            assert e.version == version, "accepted events are numbered 1..n without gaps"
            if isinstance(e, ev.JobLeased):
                assert not open_lease, "a second lease while one was still valid"
                open_lease, heard = True, False
            elif isinstance(e, LEASE_ENDS):
                open_lease = False
            elif isinstance(e, (ev.LeaseRenewed, ev.ProgressReported, ev.CheckpointRecorded)):
                heard = True
            succeeded += isinstance(e, ev.JobSucceeded)
        assert succeeded <= 1, "completed twice"
        assert s.lease is None or s.lease.confirmed == heard, "confirmed is exactly: its holder acted on it"
        assert s.epoch == self.max_epoch_seen
        assert s.progress_pct >= self.high_water, "visible progress went backwards"
        self.high_water = s.progress_pct
        assert 0 <= s.attempts_used <= s.max_attempts
        assert 0 <= s.preemptions <= s.max_preemptions
        assert len(s.checkpoints) <= s.keep_checkpoints

    def teardown(self) -> None:
        hypothesis.event(f"commands sent: {len(self.sent) // 10 * 10}+")
        if not self.history:
            return
        assert fold(self.history) == self.state
        n = len(self.history)
        for split in {0, 1, n // 3, n // 2, n - 1, n}:
            assert fold(self.history[split:], fold(self.history[:split])) == self.state


JobMachine.TestCase.settings = settings(
    max_examples=examples(1000),
    stateful_step_count=20,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestJobMachine = JobMachine.TestCase


# --- the same properties over plain random command lists ------------------------------------------------
# Hypothesis draws only a seed and a length here; a seeded Random builds the commands. Generation stays
# cheap (this runs thousands of decide calls per second) while failures still reproduce from the seed.


def _random_command(rng: random.Random, job_id: str, epoch_hint: int) -> Any:
    i = f"r{rng.randrange(10**6)}"
    e = rng.randint(0, epoch_hint + 1)
    w = rng.choice(WORKERS)
    n = rng.randint(0, 50)
    return rng.choice(
        (
            lambda: c.GrantLease(i, job_id, w, POOL, rng.randint(1, 40_000)),
            lambda: c.RenewLease(i, job_id, e, w),
            lambda: c.ReportProgress(i, job_id, e, w, n, float(n * 2)),
            lambda: c.RecordCheckpoint(i, job_id, e, w, f"k{n}", n, float(n * 2), "s", 1),
            lambda: c.CompleteJob(i, job_id, e, w, "a", "s", 1),
            lambda: c.FailJob(i, job_id, e, w, "e", "m", n % 5 != 0),
            lambda: c.ReleaseLease(i, job_id, e, w),
            lambda: c.ReleaseLease(i, job_id, e, w, UNCLAIMED),
            lambda: c.ExpireLease(i, job_id, e),
            lambda: c.CancelJob(i, job_id),
            lambda: c.PauseJob(i, job_id),
            lambda: c.ResumeJob(i, job_id),
            lambda: c.RequeueJob(i, job_id),
            lambda: c.ActivateJob(i, job_id),
            lambda: c.Reprioritize(i, job_id, rng.randint(-2, 2)),
            lambda: c.ResolveParent(i, job_id, "p1", rng.choice(sorted(Status.TERMINAL))),
        )
    )()


def random_history(seed: int, length: int) -> tuple[list[Any], JobState | None]:
    """The accepted events of `length` random commands decided at random, non-decreasing times."""
    rng = random.Random(seed)
    first = submit(
        parents=rng.choice(((), (), ("p1",))),
        max_attempts=rng.randint(1, 3),
        max_preemptions=rng.randint(1, 4),
        keep_checkpoints=rng.randint(1, 3),
    )
    now, state, events = T0, None, []
    command: Any = first
    for _ in range(length + 1):
        now += rng.choice((0, rng.randint(0, 5_000), rng.randint(0, 45_000)))
        out = decide(state, command, now)
        for e in out:
            state = evolve(state, e)
        events.extend(e for e in out if not isinstance(e, ev.CommandRejected))
        command = _random_command(rng, first.job_id, state.epoch if state else 0)
    return events, state


@settings(max_examples=examples(1000), deadline=None)
@given(seed=st.integers(0, 2**32), length=st.integers(0, 60), cut=st.floats(0.0, 1.0))
def test_fold_of_a_split_history_is_the_fold_of_the_whole(seed: int, length: int, cut: float) -> None:
    events, state = random_history(seed, length)
    split = int(cut * len(events))
    assert fold(events) == state
    assert fold(events[split:], fold(events[:split])) == state


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        inner = [a for a in typing.get_args(t) if a is not type(None)]
        out.append((f.name, tuple if typing.get_origin(t) is tuple else (inner[0] if inner else t)))
    return tuple(out)


def _blank(cls: type, version: int, n: int) -> Any:
    """An instance with every field filled by type, whatever it means: replay must tolerate nonsense."""
    filler = {str: "x", int: n, float: float(n), bool: n % 2 == 0, tuple: ("x",)}
    values = {name: _blank(kind, version, n) if dataclasses.is_dataclass(kind) else filler[kind]
              for name, kind in _field_kinds(cls)}
    if "job_id" in values:  # not for a nested record (RenderSpec)
        values.update(job_id="j", version=version, at_ms=T0 + version)
    if "status" in values:
        values["status"] = Status.RUNNING
    return cls(**values)


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(st.sampled_from(ev.JOB_EVENTS), max_size=12), st.integers(0, 97))
def test_evolve_never_raises_on_events_out_of_place(kinds: list[type], n: int) -> None:
    """Replay must not fail, even for an order decide would never produce."""
    state = evolve(None, _blank(ev.JobSubmitted, 1, n))
    for version, cls in enumerate(kinds, start=2):
        state = evolve(state, _blank(cls, version, n))
    assert state is not None and state.version >= 1
