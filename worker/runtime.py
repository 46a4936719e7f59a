"""The worker's life: register, ask for a lease (long-poll), run exactly one job at a time, ask again.

A worker holds one model in memory (loaded once, `Renderer`) and serves the pools of that model on its GPU
type. Between jobs it only long-polls; a preemption notice while idle ends it at once, one during a job
goes through the job's emergency checkpoint and release (job.py). `once` / `max_jobs` end it after that
many leases, whatever their outcome.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from spotreel.worker.artifacts import ArtifactStore
from spotreel.worker.checkpoints import CheckpointStore
from spotreel.domain.checkpoint_interval import IntervalPolicy
from spotreel.worker.job import JobRun, RunResult
from spotreel.worker.storage import StorageBudgets
from spotreel.worker.metrics import WorkerMetrics
from spotreel.worker.report import say
from spotreel.worker.signals import PreemptionNotice
from spotreel.worker.stuck import DEFAULT_MIN_S, DEFAULT_STEPS, STUCK_EXIT
from spotreel.worker.transport import LeaseLost, Transport, TransportError
from spotreel.worker.transport_http import Refused

log = logging.getLogger("spotreel.worker")


@dataclass(frozen=True)
class ServedModel:
    """A registry model this worker may render: its settings, and how to load its weights."""

    name: str
    sampler: str | None
    guidance_scale: float
    load: Callable[[], Any]  # builds the Renderer (minutes for a real model)


@dataclass(frozen=True)
class RuntimeOptions:
    sampler: str | None = None  # None: the model family's default sampler
    # Guidance and negative prompt of a job that names none (a job's own, on its lease, come first):
    # --guidance-scale (or the registry entry's), --negative-prompt.
    guidance_scale: float = 1.0
    negative_prompt: str = ""
    model: str | None = None  # the registry name of the loaded model: a lease for another is released unclaimed
    lease_wait_s: float = 20.0
    lease_ttl_ms: int | None = None  # None: the control plane's default
    max_jobs: int | None = None  # None: until stopped
    # Checkpoint interval: a fixed one, else Young/Daly from measured cost and the MTBF, bounded. The MTBF is
    # the pool's measured lease-loss rate (each lease brings it) weighed against this prior, which counts as
    # `mtbf_prior_losses` losses (interval.estimated_mtbf_s).
    checkpoint_every_s: float | None = None
    mtbf_s: float = 3600.0
    mtbf_prior_losses: float = 1.0
    checkpoint_min_s: float = 5.0
    checkpoint_max_s: float = 600.0
    heartbeat_s: float | None = None
    progress_s: float | None = None
    # The worker's own stuck rule (stuck.py); 0 steps turns it off (the scheduler's rule still applies).
    stuck_steps: int = DEFAULT_STEPS
    stuck_min_s: float = DEFAULT_MIN_S
    # How long S3 may keep a checkpoint (skipped past it) and the resume read or video upload (the attempt
    # fails past it) waiting: job.StorageBudgets.
    budgets: StorageBudgets = StorageBudgets()

    def policy(self) -> IntervalPolicy:
        if self.checkpoint_every_s is not None:
            return IntervalPolicy.fixed(self.checkpoint_every_s)
        return IntervalPolicy.adaptive(self.mtbf_s, self.checkpoint_min_s, self.checkpoint_max_s,
                                       prior_losses=self.mtbf_prior_losses)


class _Renewing:
    """Heartbeats a lease from a thread while the worker does something long outside a job (a model load)."""

    def __init__(self, transport: Transport, lease: Any) -> None:
        self.transport, self.lease = transport, lease
        self.every_s = max(0.5, min(lease.heartbeat_seconds, lease.lease_ttl_ms / 3000))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="switch-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.transport.heartbeat(self.lease)
            except LeaseLost:
                return  # the job run that follows finds out on its own first command
            except TransportError as exc:
                log.warning("heartbeat while loading a model failed: %s", exc)

    def __enter__(self) -> "_Renewing":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


class WorkerRuntime:
    def __init__(self, transport: Transport, renderer: Any, s3: Any, checkpoints: CheckpointStore,
                 artifacts: ArtifactStore, notice: PreemptionNotice, options: RuntimeOptions,
                 report: Callable[..., None] = say, metrics: WorkerMetrics | None = None,
                 models: dict[str, ServedModel] | None = None) -> None:
        self.transport = transport
        # The registry models it may switch to (one loaded at a time: the renderer's, options.model).
        self.models = dict(models or {})
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.renderer = renderer
        self.s3 = s3
        self.checkpoints = checkpoints
        self.artifacts = artifacts
        self.notice = notice
        self.options = options
        self.report = report
        # One policy for the worker's life: the checkpoint cost it measures carries over between jobs.
        self.policy = options.policy()
        self.outcomes: list[RunResult] = []

    def serve(self) -> int:
        """Runs until stopped or `max_jobs` leases were run; returns the process exit status."""
        try:
            registered = self._with_retry(self.transport.register, "register")
        except Refused as exc:
            print(f"spotreel worker: {exc}", file=sys.stderr)
            return 2
        if registered is None:
            return 0
        profile = self.transport.profile
        self.report("registered", worker_id=profile.worker_id, models=list(profile.models), gpu_type=profile.gpu_type)
        while not self.notice.requested and not self.notice.advised:
            try:
                lease = self._with_retry(lambda: self.transport.lease(self._wait_slice(),
                                                                      lease_ttl_ms=self.options.lease_ttl_ms), "lease")
            except Refused as exc:
                print(f"spotreel worker: {exc}", file=sys.stderr)
                return 2
            if lease is None:
                continue
            if self.notice.requested:
                # Granted while the notice arrived: hand it straight back, the job is requeued at once.
                try:
                    self.transport.release(lease, "preempted")
                except Exception:
                    log.warning("could not release %s; its lease will expire", lease.job_id, exc_info=True)
                self.report("job", job_id=lease.job_id, epoch=lease.epoch, outcome="preempted", steps_run=0)
                break
            mtbf = self._observe_pool(lease)
            self.report("leased", job_id=lease.job_id, epoch=lease.epoch, attempt=lease.attempt,
                        resume_checkpoint_key=lease.resume_checkpoint_key, resume_step=lease.resume_step,
                        pool_lease_losses_1h=lease.pool_lease_losses_1h,
                        pool_leased_seconds_1h=lease.pool_leased_seconds_1h, mtbf_s=mtbf)
            started = time.monotonic()
            self._switch_for(lease)
            outcome = self._run(lease)
            self.outcomes.append(outcome)
            self.report("job", job_id=lease.job_id, epoch=lease.epoch, outcome=outcome.kind, detail=outcome.detail,
                        artifact_key=outcome.artifact_key, steps_run=outcome.steps_run,
                        seconds=round(time.monotonic() - started, 3))
            if self.options.max_jobs is not None and len(self.outcomes) >= self.options.max_jobs:
                break
            if self.notice.advised:
                break
        self.report("exit", jobs=len(self.outcomes), preempted=self.notice.requested,
                    **({"advised": self.notice.advice} if self.notice.advised else {}))
        return 0

    def _observe_pool(self, lease) -> float | None:
        """The pool's measured losses move the checkpoint interval's MTBF (a fixed interval ignores them)."""
        if lease.pool_lease_losses_1h is None or lease.pool_leased_seconds_1h is None:
            return self.policy.mtbf_s
        try:
            return self.policy.observe_pool(lease.pool_lease_losses_1h, lease.pool_leased_seconds_1h)
        except ValueError:
            log.warning("ignoring the pool's lease losses %r over %r s", lease.pool_lease_losses_1h,
                        lease.pool_leased_seconds_1h)
            return self.policy.mtbf_s

    def _switch_for(self, lease) -> None:
        """The scheduler gives a job of another model this worker serves only when none of the loaded one's
        is left for it (domain/job_choice.py, model affinity): unload, load, declare the new one warm. The
        lease is renewed meanwhile (loading takes longer than a TTL). If the load fails the old model is
        loaded back and the lease goes back unused (job.py: wrong model, no attempt spent)."""
        target = self.models.get(lease.spec.model)
        if target is None or lease.spec.model == self.options.model:
            return
        previous = self.models.get(self.options.model or "")
        began = time.monotonic()
        self.report("switching", job_id=lease.job_id, unload=self.options.model, load=target.name)
        with _Renewing(self.transport, lease):
            self.renderer = None  # drop the old weights before the new ones come in
            gc.collect()
            try:
                self.renderer = target.load()
            except Exception:
                log.exception("could not load model %s; loading %s back", target.name, self.options.model)
                if previous is None:
                    raise
                self.renderer = previous.load()
                return
        self.options = replace(self.options, model=target.name, sampler=target.sampler,
                               guidance_scale=target.guidance_scale)
        self.transport.profile = replace(self.transport.profile, warm_models=(target.name,))
        seconds = time.monotonic() - began
        self.metrics.model_switch_seconds.observe(seconds)
        self.report("switched", job_id=lease.job_id, model=target.name, seconds=round(seconds, 3))

    def _run(self, lease) -> RunResult:
        o = self.options
        return JobRun(lease, self.transport, self.renderer, self.s3, self.checkpoints, self.artifacts, self.policy,
                      self.notice, sampler=o.sampler, heartbeat_s=o.heartbeat_s, progress_s=o.progress_s,
                      on_step=lambda step: self.report("step", job_id=lease.job_id, epoch=lease.epoch,
                                                       step=step),
                      stuck_steps=o.stuck_steps, stuck_min_s=o.stuck_min_s,
                      on_wedged=lambda why: self._wedged(lease, why), metrics=self.metrics, model=o.model,
                      guidance_scale=o.guidance_scale, negative_prompt=o.negative_prompt, budgets=o.budgets).run()

    def _wedged(self, lease, why: str) -> None:
        """A step hung past the stuck report (job.py): the thread cannot be stopped and the device may be
        wedged, so the process ends; the job was already handed back as a stuck attempt."""
        self.report("job", job_id=lease.job_id, epoch=lease.epoch, outcome="stuck", detail=why)
        self.report("exit", jobs=len(self.outcomes) + 1, preempted=False, stuck=True)
        log.critical("a step is still hung after the job was reported stuck: exiting with status %d", STUCK_EXIT)
        logging.shutdown()
        os._exit(STUCK_EXIT)

    def _wait_slice(self) -> float:
        # Short enough that a notice while idle ends the worker within seconds, not a whole long-poll.
        return max(1.0, min(self.options.lease_wait_s, 10.0))

    def _with_retry(self, call: Callable[[], Any], what: str) -> Any:
        """Retry a call that failed in transit (exponential backoff, capped; no sooner than a Retry-After the
        control plane gave) until it answers or a notice arrives; Refused (bad key, bad request) propagates."""
        delay = 0.5
        while not self.notice.requested:
            try:
                return call()
            except Refused:
                raise
            except TransportError as exc:
                # A told wait gets a random second more, so a fleet told the same does not come back at once.
                wait = max(delay, exc.retry_after_s + random.random()) if exc.retry_after_s else delay
                log.warning("%s failed (%s); retrying in %.1f s", what, exc, wait)
                self.notice.wait(wait)
                delay = min(delay * 2, 10.0)
        return None
