"""One lease, run to an end: resume or start, denoise step by step with checkpoints, then complete.

Every way out is explicit and leaves the job's history telling what happened:
- succeeded: MP4 uploaded under the lease's epoch, CompleteJob accepted, old checkpoints deleted;
- stale: the scheduler refused a command because this worker lost the lease (expired while it was stopped
  or cut off); it stops writing at once and deletes what it uploaded under its own epoch, which nothing
  references. Checkpoints it recorded before are kept: the next worker resumes from them;
- preempted / drained: emergency checkpoint, then ReleaseLease (requeued at once, not after the TTL);
- cancelled: ReleaseLease confirming the cancel, no checkpoint;
- invalid_checkpoint: the resume checkpoint failed its checksum or fingerprint; FailJob names it
  (AttemptFailed.invalid_checkpoint_key) and the scheduler's next lease resumes from the one before it, or
  from step 0 when there is none;
- stuck: no step advanced for too long (stuck.py); the pulse reported FailJob(stuck) and stopped renewing.
  If the step never returns, `on_wedged` is called after STUCK_GRACE_S (the runtime ends the process);
- failed: anything else, as a FailJob with the error; `storage_unavailable` when the store did not answer
  the resume checkpoint's read or the video's upload within the storage budget (storage.py).

Storage faults are latency: every S3 call the job needs is retried within a budget (storage.py). A periodic
checkpoint that cannot be written within the checkpoint budget is skipped (counted, logged, nothing
recorded), so the job's durable checkpoint stays the previous one and the render goes on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from botocore.exceptions import BotoCoreError, ClientError

from spotreel.runtime import tracing
from spotreel.domain import images
from spotreel.domain.images import ImageRef
from spotreel.domain.leases import UNCLAIMED
from spotreel.domain.retry import STORAGE_UNAVAILABLE
from spotreel.worker.artifacts import ArtifactStore
from spotreel.worker.checkpoints import CheckpointError, CheckpointStore
from spotreel.domain.checkpoint_interval import IntervalPolicy
from spotreel.worker.metrics import WorkerMetrics
from spotreel.worker.render_loop import Renderer, RenderRequest, RenderState
from spotreel.worker.pulse import Position, Pulse
from spotreel.worker.signals import PreemptionNotice
from spotreel.worker.storage import Budget, StorageBudgets, StorageUnavailable, call_within
from spotreel.worker.stuck import DEFAULT_MIN_S, DEFAULT_STEPS, STUCK_EXIT, STUCK_GRACE_S, StepWatch
from spotreel.worker.transport import WorkerLease, LeaseLost, Transport, TransportError, Verdict
from spotreel.media.video import encode_mp4, frames_checksum

log = logging.getLogger("spotreel.worker.job")

# Share of the job's progress that denoising covers; decoding, encoding and uploading take the rest.
DENOISE_SHARE = 95.0
# Fenced commands whose answer was lost are retried this often before the worker gives up on the lease.
COMMAND_TRIES = 5
# An emergency checkpoint leaves this much of the preemption deadline for the release after it.
RELEASE_RESERVE_S = 2.0


@dataclass(frozen=True)
class RunResult:
    kind: str  # succeeded | stale | stuck | preempted | drained | cancelled | invalid_checkpoint | failed | wrong_model
    detail: str = ""
    artifact_key: str | None = None
    steps_run: int = 0


def step_pct(step: int, num_steps: int) -> float:
    return round(DENOISE_SHARE * step / num_steps, 3)


class JobRun:
    def __init__(self, lease: WorkerLease, transport: Transport, renderer: Renderer, s3: Any, checkpoints: CheckpointStore,
                 artifacts: ArtifactStore, policy: IntervalPolicy, notice: PreemptionNotice, sampler: str | None = None,
                 heartbeat_s: float | None = None, progress_s: float | None = None,
                 on_step: Callable[[int], None] | None = None, stuck_steps: int = DEFAULT_STEPS,
                 stuck_min_s: float = DEFAULT_MIN_S, on_wedged: Callable[[str], None] | None = None,
                 metrics: WorkerMetrics | None = None, model: str | None = None,
                 guidance_scale: float = 1.0, negative_prompt: str = "",
                 budgets: StorageBudgets = StorageBudgets()) -> None:
        self.guidance_scale, self.negative_prompt = guidance_scale, negative_prompt
        self.budgets = budgets
        self.lease = lease
        self.model = model  # the registry name of the loaded weights (None: not known, any lease is served)
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.transport = transport
        self.renderer = renderer
        self.s3 = s3
        self.checkpoints = checkpoints
        self.artifacts = artifacts
        self.policy = policy
        self.notice = notice
        self.sampler = sampler
        ttl_s = lease.lease_ttl_ms / 1000.0
        # Several beats per lease, whatever the control plane's default cadence: a short test TTL must hold.
        self.heartbeat_s = heartbeat_s or min(lease.heartbeat_seconds, ttl_s / 3)
        self.progress_s = progress_s or min(lease.progress_seconds, ttl_s / 3)
        self.on_step = on_step
        self.durable_step = -1  # newest step whose checkpoint the scheduler accepted (or resumed from)
        self.last_ckpt_at = time.monotonic()
        self.steps_run = 0
        self.pulse: Pulse | None = None
        self.stuck_steps, self.stuck_min_s = stuck_steps, stuck_min_s
        self.watch: StepWatch | None = None
        self.on_wedged = on_wedged if on_wedged is not None else _exit_wedged
        self._finished = threading.Event()
        self._advice_checkpointed = False

    # -- entry -------------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        # At 0 from the pool's first lease on: a failure counter whose series appeared at 1 would hide its
        # first increase from increase()/rate() (SpotreelCheckpointFailures).
        self.metrics.checkpoint_failures.labels(self.lease.pool)
        lease = self.lease
        # A traced job (its lease answer names the trace): this lease, its checkpoints and upload are spans
        # of it, and the commands sent inside them carry it (spotreel/runtime/tracing.py).
        with tracing.joined("worker lease", lease.traceparent,
                            {"spotreel.job_id": lease.job_id, "spotreel.epoch": lease.epoch,
                             "spotreel.worker_id": lease.worker_id, "spotreel.pool": lease.pool}) as span:
            outcome = self._run_lease()
            if span is not None:
                span.set_attribute("spotreel.outcome", outcome.kind)
                span.set_attribute("spotreel.steps_run", outcome.steps_run)
        self.metrics.jobs.labels(self.lease.pool, outcome.kind).inc()
        return outcome

    def _run_lease(self) -> RunResult:
        lease = self.lease
        spec = lease.spec
        if self.model is not None and spec.model != self.model:
            # Not the weights this worker loaded: handed back unused, which the domain counts as no attempt.
            self._release(UNCLAIMED)
            return RunResult("wrong_model", f"lease is for model {spec.model}; this worker loaded {self.model}")
        try:
            image = images.parse(spec.input_image) if spec.input_image else None
            # The job's own render options first; what it leaves out, this worker's for the model.
            req = RenderRequest.from_job(
                prompt=spec.prompt, seed=spec.seed, num_steps=spec.num_steps, resolution=spec.resolution,
                duration_s=spec.duration_s, fps=spec.fps,
                sampler=spec.sampler or self.sampler or self.renderer.default_sampler,
                guidance_scale=self.guidance_scale if spec.guidance_scale is None else spec.guidance_scale,
                negative_prompt=self.negative_prompt if spec.negative_prompt is None else spec.negative_prompt,
                image_sha256=image.sha256 if image is not None else "")
            # What this model can do (sizes, an image or none): a request it cannot render fails for good, not
            # once per attempt.
            self.renderer.check(req)
        except ValueError as exc:
            return self._fail("invalid_request", str(exc), retryable=False)
        start_step = lease.resume_step or 0
        start_pct = lease.resume_progress_pct if lease.resume_progress_pct is not None else 0.0
        phase = "loading_checkpoint" if lease.resume_checkpoint_key else "starting"
        self.watch = StepWatch(self.stuck_steps, self.stuck_min_s, start_step) if self.stuck_steps > 0 else None
        pool = lease.pool
        self.pulse = Pulse(self.transport, lease, self.heartbeat_s, self.progress_s,
                           Position(start_step, start_pct, phase), self.watch, self._stuck,
                           on_renewal=lambda kind, outcome: self.metrics.renewal(pool, kind, outcome)).start()
        self.metrics.busy.set(1)
        try:
            return self._run(req, image)
        except LeaseLost as exc:
            return self._lost(exc.reason)
        except Exception as exc:  # a bug or a broken model: a visible, retryable failure
            if self.pulse.lost.is_set():
                return self._lost(self.pulse.lost_reason)
            log.exception("job %s epoch %d failed", lease.job_id, lease.epoch)
            return self._fail("worker_error", f"{type(exc).__name__}: {exc}", retryable=True)
        finally:
            self._finished.set()
            self.pulse.stop()
            self.metrics.busy.set(0)
            forget = getattr(self.transport, "forget", None)
            if forget is not None:
                forget(lease)

    def _run(self, req: RenderRequest, image: ImageRef | None = None) -> RunResult:
        began = time.monotonic()
        state = self._begin(req, image)
        if isinstance(state, RunResult):
            return state
        pool = self.lease.pool
        self.metrics.phase.labels(pool, "load").observe(time.monotonic() - began)
        denoising = time.monotonic()
        pulse = self.pulse
        assert pulse is not None
        while True:
            if pulse.lost.is_set():
                return self._lost(pulse.lost_reason)
            if self.notice.requested:
                return self._hand_back(state, "preempted", "preempted")
            if pulse.cancel.is_set():
                self._release("cancelled")
                return RunResult("cancelled", steps_run=self.steps_run)
            if pulse.drain.is_set():
                return self._hand_back(state, "paused", "drained")
            if self.notice.advised and not self._advice_checkpointed:
                # An early warning (rebalance): what is rendered so far is made durable now, in case the
                # interruption follows with less time than a checkpoint takes; the render goes on.
                self._advice_checkpointed = True
                if state.step > self.durable_step:
                    self._checkpoint(state)
            if state.done:
                self.metrics.phase.labels(pool, "denoise").observe(time.monotonic() - denoising)
                return self._finish(state)
            stepping = time.monotonic()
            state = self.renderer.step(state)
            self.metrics.step.labels(pool).observe(time.monotonic() - stepping)
            self.steps_run += 1
            pulse.move(state.step, step_pct(state.step, state.num_steps), "denoising")
            if self.watch is not None:
                self.watch.advanced(state.step)
            if self.on_step is not None:
                self.on_step(state.step)
            if not state.done and self.policy.due(time.monotonic(), self.last_ckpt_at):
                self._checkpoint(state)

    # -- start or resume ---------------------------------------------------------------------------------

    def _begin(self, req: RenderRequest, image: ImageRef | None = None) -> RenderState | RunResult:
        key = self.lease.resume_checkpoint_key
        if not key:
            if image is None:
                return self.renderer.start(req)
            # Only a start reads the image: a resume's first frame is in the checkpoint's latents.
            try:
                data = self._needed(f"read of input image {image.key}", "image", lambda: self._image(image))
            except StorageUnavailable as exc:
                return self._unavailable(exc)
            except ClientError as exc:
                return self._fail("invalid_request", f"the input image {image.key} cannot be read: {exc}",
                                  retryable=False)
            if hashlib.sha256(data).hexdigest() != image.sha256:
                return self._fail("invalid_request", f"the input image {image.key} does not have its sha256",
                                  retryable=False)
            try:
                return self.renderer.start(req, data)
            except ValueError as exc:  # the bytes do not decode as an image
                return self._fail("invalid_request", str(exc), retryable=False)
        try:
            fingerprint = self.renderer.fingerprint(req)
            ckpt = self._needed(f"read of checkpoint {key}", "resume",
                                lambda: self.checkpoints.load(key, None, fingerprint))
            if self.lease.resume_step is not None and ckpt.step != self.lease.resume_step:
                raise CheckpointError(f"{key} holds step {ckpt.step}, the job recorded step {self.lease.resume_step}")
            state = self.renderer.resume(req, ckpt)
        except StorageUnavailable as exc:
            return self._unavailable(exc)
        except CheckpointError as exc:
            log.warning("job %s: resume checkpoint %s is unusable (%s); reporting it", self.lease.job_id, key, exc)
            self._command(lambda: self.transport.fail(self.lease, "invalid_checkpoint", str(exc), True, key))
            return RunResult("invalid_checkpoint", f"{key}: {exc}")
        self.durable_step = state.step
        assert self.pulse is not None
        # Honest progress: this lease restarts at the checkpoint, below what the job may have shown before.
        self.pulse.move(state.step, step_pct(state.step, state.num_steps), "resuming")
        log.info("job %s epoch %d: resumed from %s at step %d", self.lease.job_id, self.lease.epoch, key, state.step)
        return state

    # -- checkpoints -------------------------------------------------------------------------------------

    def _checkpoint(self, state: RenderState, budget_s: float | None = None) -> bool:
        """Save and record a checkpoint of `state`; True once the scheduler accepted it. One the store does not
        take within `budget_s` (default: the checkpoint budget) is skipped: False, and the render goes on."""
        if state.step <= self.durable_step:
            return True
        with tracing.child("worker checkpoint", {"spotreel.step": state.step}):
            return self._checkpoint_now(state, self.budgets.checkpoint_s if budget_s is None else budget_s)

    def _checkpoint_now(self, state: RenderState, budget_s: float) -> bool:
        began = time.monotonic()
        pool = self.lease.pool
        snapshot = self.renderer.snapshot(state)
        pulse = self.pulse
        emergency = self.notice.requested
        try:
            # An emergency checkpoint runs after the notice, so only a lost lease stops it early.
            saved = call_within(
                Budget(max(0.0, budget_s)), f"checkpoint of step {state.step}",
                lambda: self.checkpoints.save(self.lease.job_id, self.lease.epoch, state.step, snapshot),
                stop=lambda: (pulse is not None and pulse.lost.is_set()) or (self.notice.requested and not emergency),
                on_retry=lambda exc: self.metrics.storage_retries.labels(pool, "checkpoint").inc(),
                sleep=time.sleep if emergency else self.notice.wait)
        except (StorageUnavailable, BotoCoreError, ClientError) as exc:
            # Skipped: nothing recorded, so the job's durable checkpoint stays the previous one. The next one
            # is tried an interval later; the failure's time is not the checkpoint's cost (Young/Daly).
            self.metrics.checkpoint_failures.labels(pool).inc()
            self.last_ckpt_at = time.monotonic()
            log.warning("job %s epoch %d: checkpoint of step %d skipped (%s); durable step stays %d",
                        self.lease.job_id, self.lease.epoch, state.step, exc, self.durable_step)
            return False
        written = time.monotonic() - began
        written_ms = int(written * 1000)
        self.metrics.checkpoint_seconds.labels(pool).observe(written)
        self.metrics.checkpoint_bytes.labels(pool).observe(saved.size_bytes)
        pct = step_pct(state.step, state.num_steps)
        try:
            # Not re-sent when pending: the command is durable, and a copy could only be refused as not newer.
            verdict = self._command(lambda: self.transport.checkpoint(self.lease, saved.key, state.step, pct,
                                                                      saved.checksum, saved.size_bytes, written_ms,
                                                                      self.renderer.checkpoint_fingerprint()),
                                    retry_pending=False)
        except LeaseLost:
            # Written under an epoch that no longer holds the lease: nothing references it, so it goes.
            self._delete_quietly(self.checkpoints.bucket, saved.key)
            raise
        finally:
            self.last_ckpt_at = time.monotonic()
            self.policy.record_cost(self.last_ckpt_at - began)
        # checkpoint_not_newer: a retry of a command that landed after all, or a newer one exists; either
        # way the job can resume from this step or later, which is all `durable_step` promises.
        if verdict is not None and (verdict.accepted or verdict.reason == "checkpoint_not_newer"):
            self.durable_step = state.step
        return self.durable_step >= state.step

    def _hand_back(self, state: RenderState, reason: str, kind: str) -> RunResult:
        """Emergency checkpoint, then release, both inside the preemption deadline when there is one."""
        try:
            left = self.notice.seconds_left() - RELEASE_RESERVE_S if self.notice.requested else float("inf")
            if state.step > self.durable_step and left > 0:
                self._checkpoint(state, min(self.budgets.checkpoint_s, left))
        except LeaseLost as exc:
            return RunResult("stale", exc.reason, steps_run=self.steps_run)
        except Exception:
            log.exception("job %s: emergency checkpoint failed; releasing without it", self.lease.job_id)
        self._release(reason)
        return RunResult(kind, f"released at step {state.step}, durable step {self.durable_step}",
                       steps_run=self.steps_run)

    def _release(self, reason: str) -> None:
        try:
            self._command(lambda: self.transport.release(self.lease, reason))
        except LeaseLost:
            pass  # already gone: the scheduler requeued the job on its own

    # -- the end -----------------------------------------------------------------------------------------

    def _finish(self, state: RenderState) -> RunResult:
        pulse = self.pulse
        assert pulse is not None
        if self.watch is not None:
            self.watch.finishing()
        phase = self.metrics.phase
        pool = self.lease.pool
        pulse.move(state.step, DENOISE_SHARE + 1.0, "decoding")
        with phase.labels(pool, "decode").time():
            frames = self.renderer.finish(state)
            digest = frames_checksum(frames)
        pulse.move(state.step, DENOISE_SHARE + 3.0, "encoding")
        with phase.labels(pool, "encode").time():
            mp4 = encode_mp4(frames, self.lease.spec.fps)
        if pulse.lost.is_set():
            return RunResult("stale", pulse.lost_reason, steps_run=self.steps_run)
        pulse.move(state.step, DENOISE_SHARE + 4.0, "uploading")
        try:
            with tracing.child("worker upload", {"spotreel.bytes": len(mp4)}), phase.labels(pool, "upload").time():
                up = self._needed(f"upload of video {self.lease.job_id}/e{self.lease.epoch}", "upload",
                                  lambda: self.artifacts.upload(self.lease.job_id, self.lease.epoch, mp4, digest))
        except StorageUnavailable as exc:
            return self._unavailable(exc)
        try:
            verdict = self._command(lambda: self.transport.complete(self.lease, up.key, up.checksum, up.size_bytes))
        except LeaseLost as exc:
            # A refusal for a lease this worker no longer holds: the video under this epoch is referenced by
            # nothing, and "terminal" never gets here (it could be this worker's own earlier success).
            if exc.reason != "terminal":
                self._delete_quietly(self.artifacts.bucket, up.key)
            log.warning("job %s epoch %d: completion refused (%s); local result discarded",
                        self.lease.job_id, self.lease.epoch, exc.reason)
            return RunResult("stale", exc.reason, steps_run=self.steps_run)
        if verdict is None or not verdict.accepted:
            reason = verdict.reason if verdict else "no verdict"
            if verdict is not None and not verdict.pending:
                self._delete_quietly(self.artifacts.bucket, up.key)
            return RunResult("failed", f"completion not accepted: {reason}", steps_run=self.steps_run)
        try:
            self.checkpoints.prune(self.lease.job_id, keep_keys=set())
        except Exception:
            log.warning("job %s: could not delete old checkpoints", self.lease.job_id, exc_info=True)
        return RunResult("succeeded", artifact_key=up.key, steps_run=self.steps_run)

    def _image(self, image: ImageRef) -> bytes:
        got = self.s3.get_object(Bucket=self.artifacts.bucket, Key=image.key)
        return got["Body"].read()

    def _lost(self, reason: str) -> RunResult:
        if reason == "stuck" and self.pulse is not None:
            return RunResult("stuck", self.pulse.stuck_detail, steps_run=self.steps_run)
        return RunResult("stale", reason, steps_run=self.steps_run)

    def _stuck(self, why: str) -> None:
        """On the pulse thread, once the run was reported stuck: a step that returns ends the run (`_lost`);
        one that does not within STUCK_GRACE_S leaves the process unusable (`on_wedged`)."""
        if not self._finished.wait(STUCK_GRACE_S):
            self.on_wedged(why)

    def _needed(self, what: str, op: str, call: Callable[[], Any]) -> Any:
        """A call the job cannot do without, retried within the storage budget; a notice or a lost lease stops
        the retries (StorageUnavailable with `interrupted`)."""
        pulse = self.pulse
        pool = self.lease.pool
        return call_within(Budget(self.budgets.storage_s), what, call,
                           stop=lambda: self.notice.requested or (pulse is not None and pulse.lost.is_set()),
                           on_retry=lambda exc: self.metrics.storage_retries.labels(pool, op).inc(),
                           sleep=self.notice.wait)

    def _unavailable(self, exc: StorageUnavailable) -> RunResult:
        """The store did not answer in time. Interrupted by a lost lease: stale; by a notice: handed back (the
        next worker starts from the durable checkpoint); else the attempt fails, retryable, saying why."""
        pulse = self.pulse
        if pulse is not None and pulse.lost.is_set():
            return self._lost(pulse.lost_reason)
        if exc.interrupted and self.notice.requested:
            self._release("preempted")
            return RunResult("preempted", f"{exc}", steps_run=self.steps_run)
        log.warning("job %s epoch %d: %s", self.lease.job_id, self.lease.epoch, exc)
        return self._fail(STORAGE_UNAVAILABLE, str(exc), retryable=True)

    def _fail(self, code: str, message: str, retryable: bool) -> RunResult:
        try:
            self._command(lambda: self.transport.fail(self.lease, code, message, retryable))
        except LeaseLost as exc:
            return RunResult("stale", exc.reason, steps_run=self.steps_run)
        return RunResult("failed", f"{code}: {message}", steps_run=self.steps_run)

    # -- helpers -----------------------------------------------------------------------------------------

    def _command(self, send: Callable[[], Verdict], retry_pending: bool = True) -> Verdict | None:
        """Send a fenced command, retrying when the answer is lost or pending. LeaseLost propagates (and
        tells the pulse); None means no verdict after every try (the lease TTL settles it)."""
        delay = 0.5
        last: Verdict | None = None
        for _ in range(COMMAND_TRIES):
            try:
                last = send()
            except LeaseLost as exc:
                if self.pulse is not None:
                    self.pulse.mark_lost(exc.reason)
                raise
            except TransportError as exc:
                log.warning("job %s: %s; retrying", self.lease.job_id, exc)
                time.sleep(delay)
                delay = min(delay * 2, 4.0)
                continue
            if self.pulse is not None:
                self.pulse.heed(last)
            if not last.pending or not retry_pending:
                return last
            time.sleep(delay)
        return last

    def _delete_quietly(self, bucket: str, key: str) -> None:
        """Only for objects under this lease's own epoch whose recording the scheduler refused."""
        try:
            self.s3.delete_object(Bucket=bucket, Key=key)
            log.info("deleted unreferenced %s/%s", bucket, key)
        except Exception:
            log.warning("could not delete unreferenced object %s/%s", bucket, key, exc_info=True)


def _exit_wedged(why: str) -> None:
    log.critical("a step is still hung %.0f s after the job was reported stuck (%s): exiting with status %d",
                 STUCK_GRACE_S, why, STUCK_EXIT)
    logging.shutdown()
    os._exit(STUCK_EXIT)
