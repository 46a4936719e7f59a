"""Builders for job-core tests: a submitted job, a driver that decides and folds, common commands."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.events import CommandRejected
from spotreel.domain.evolve import evolve
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec
from spotreel.domain.state import JobState

TENANT = "acme"
KEY = "key-1"
JOB = ids.job_id_for(TENANT, KEY)
POOL = ids.pool_key("tiny-t2v", "h100")
TTL = 30_000
T0 = 1_700_000_000_000


def submit(key: str = KEY, tenant: str = TENANT, **overrides: Any) -> c.SubmitJob:
    """A SubmitJob; an override named like a RenderSpec field (model, prompt, seed, ...) goes into its spec."""
    spec = {name: overrides.pop(name) for name in SPEC_FIELDS if name in overrides}
    base = c.SubmitJob(
        command_id=f"submit-{key}",
        job_id=ids.job_id_for(tenant, key),
        tenant=tenant,
        idempotency_key=key,
        request_hash="h1",
        gpu_type="h100",
        spec=RenderSpec(
            model="tiny-t2v",
            prompt="a red fox in snow",
            duration_s=4.0,
            resolution="512x512",
            fps=8,
            seed=7,
            num_steps=20,
        ),
    )
    return replace(base, spec=replace(base.spec, **spec), **overrides)


@dataclass
class Driver:
    """Decides each command against the folded state, applies the result, keeps the whole history."""

    state: JobState | None = None
    now: int = T0
    history: list[Any] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next_id(self, prefix: str = "cmd") -> str:
        return f"{prefix}-{next(self._ids)}"

    def send(self, command: Any, *, at: int | None = None, advance: int = 0) -> tuple[Any, ...]:
        self.now = (at if at is not None else self.now) + advance
        out = decide(self.state, command, self.now)
        for event in out:
            self.state = evolve(self.state, event)
        self.history.extend(out)
        return out

    @property
    def job_id(self) -> str:
        assert self.state is not None
        return self.state.job_id

    @property
    def s(self) -> JobState:
        assert self.state is not None
        return self.state

    # Shorthands; each returns the events of the decision.
    def submit(self, **overrides: Any) -> tuple[Any, ...]:
        return self.send(submit(**overrides))

    def grant(self, worker: str = "w1", ttl: int = TTL, pool: str = POOL, fingerprint: str = "") -> tuple[Any, ...]:
        return self.send(c.GrantLease(self.next_id("grant"), self.job_id, worker, pool, ttl,
                                      worker_fingerprint=fingerprint))

    def lease(self) -> tuple[int, str]:
        assert self.s.lease is not None
        return self.s.lease.epoch, self.s.lease.worker_id

    def renew(self, epoch: int | None = None, worker: str | None = None) -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        return self.send(c.RenewLease(self.next_id("renew"), self.job_id, e, w))

    def progress(self, pct: float, step: int = 0, epoch: int | None = None, worker: str | None = None,
                 phase: str = "denoising") -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        return self.send(c.ReportProgress(self.next_id("prog"), self.job_id, e, w, step, pct, phase))

    def checkpoint(self, step: int, pct: float, epoch: int | None = None, worker: str | None = None,
                   key: str | None = None) -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        key = key if key is not None else ids.checkpoint_key(self.job_id, e, step)
        return self.send(c.RecordCheckpoint(self.next_id("ckpt"), self.job_id, e, w, key, step, pct, "sum", 100))

    def complete(self, epoch: int | None = None, worker: str | None = None) -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        return self.send(
            c.CompleteJob(self.next_id("done"), self.job_id, e, w, ids.artifact_key(self.job_id, e), "sha", 1234)
        )

    def fail(self, retryable: bool = True, epoch: int | None = None, worker: str | None = None,
             invalid_checkpoint_key: str | None = None) -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        return self.send(
            c.FailJob(self.next_id("fail"), self.job_id, e, w, "oom", "CUDA out of memory", retryable,
                      invalid_checkpoint_key)
        )

    def release(self, epoch: int | None = None, worker: str | None = None, reason: str = "preempted") -> tuple[Any, ...]:
        e, w = self._who(epoch, worker)
        return self.send(c.ReleaseLease(self.next_id("rel"), self.job_id, e, w, reason))

    def expire(self, epoch: int | None = None, advance: int = TTL) -> tuple[Any, ...]:
        e = epoch if epoch is not None else self.s.epoch
        return self.send(c.ExpireLease(self.next_id("exp"), self.job_id, e), advance=advance)

    def cancel(self, reason: str = "user") -> tuple[Any, ...]:
        return self.send(c.CancelJob(self.next_id("cancel"), self.job_id, reason))

    def pause(self) -> tuple[Any, ...]:
        return self.send(c.PauseJob(self.next_id("pause"), self.job_id))

    def resume(self) -> tuple[Any, ...]:
        return self.send(c.ResumeJob(self.next_id("resume"), self.job_id))

    def activate(self, advance: int = 0) -> tuple[Any, ...]:
        return self.send(c.ActivateJob(self.next_id("act"), self.job_id), advance=advance)

    def requeue(self) -> tuple[Any, ...]:
        return self.send(c.RequeueJob(self.next_id("requeue"), self.job_id))

    def resolve(self, parent: str, outcome: str) -> tuple[Any, ...]:
        return self.send(c.ResolveParent(self.next_id("parent"), self.job_id, parent, outcome))

    def _who(self, epoch: int | None, worker: str | None) -> tuple[int, str]:
        lease = self.s.lease
        e = epoch if epoch is not None else (lease.epoch if lease else self.s.epoch)
        w = worker if worker is not None else (lease.worker_id if lease else "w1")
        return e, w


def kinds(events: tuple[Any, ...]) -> list[str]:
    return [type(e).__name__ for e in events]


def rejection(events: tuple[Any, ...]) -> str:
    assert len(events) == 1 and isinstance(events[0], CommandRejected), kinds(events)
    return events[0].reason


def leased_job(**overrides: Any) -> Driver:
    d = Driver()
    d.submit(**overrides)
    d.grant()
    return d
