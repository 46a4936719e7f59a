"""How a worker talks to the control plane, whatever carries it (HTTP to the gateway, or Kafka directly).

The runtime codes against `Transport` only. Every lease command returns a `Verdict` or raises:
- `LeaseLost`: the scheduler refused the command because this worker no longer holds the lease (stale or
  unknown epoch, lease expired, another worker, job terminal). The worker must stop writing for that job.
- `TransportError`: nothing could be said (network down, broker unreachable). The command may or may not
  have landed; the caller retries on its own schedule and the lease TTL bounds the damage.
A refusal that does not end the lease (e.g. `checkpoint_not_newer`) comes back as a Verdict with
`accepted=False` and its reason. `pending` means the command is durable but was not judged in time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Protocol

from spotreel.domain.spec import SPEC_FIELDS, RenderSpec

# Refusals after which the worker does not hold the lease any more.
LEASE_LOST_REASONS = frozenset({"stale_epoch", "unknown_epoch", "lease_expired", "worker_mismatch", "terminal",
                                "unknown_job"})


class TransportError(RuntimeError):
    """The control plane could not be reached or answered nonsense; the outcome of the call is unknown.
    `retry_after_s`: how long the control plane asked to be left alone (a 429/503's Retry-After), if it said."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LeaseLost(RuntimeError):
    def __init__(self, reason: str, detail: str = "", current_epoch: int | None = None) -> None:
        super().__init__(f"lease lost ({reason}){': ' + detail if detail else ''}")
        self.reason = reason
        self.detail = detail
        self.current_epoch = current_epoch


@dataclass(frozen=True)
class WorkerProfile:
    """Who asks for work: the models it can serve (one pool per model) on its GPU type."""

    worker_id: str
    gpu_type: str
    models: tuple[str, ...]
    warm_models: tuple[str, ...] = ()
    # Its numerical environment (Renderer.worker_fingerprint, domain/resume_match.py): the scheduler resumes its
    # leases from the newest checkpoint it can use exactly, and prefers it for jobs whose newest matches.
    fingerprint: str = ""


@dataclass(frozen=True)
class WorkerLease:
    """A granted lease as this worker holds it: the job's settings and where to resume (the WorkAssigned
    answer). The scheduler's own record of a lease, inside a job's state, is spotreel.domain.state.Lease."""

    job_id: str
    epoch: int
    worker_id: str
    attempt: int
    lease_ttl_ms: int
    lease_expires_at_ms: int
    pool: str
    gpu_type: str
    # The video to render. Its render options None: this worker's for its model (registry entry or
    # --sampler/--guidance-scale/--negative-prompt).
    spec: RenderSpec
    resume_checkpoint_key: str | None = None
    resume_step: int | None = None
    resume_progress_pct: float | None = None
    # Cadence the control plane asks for (the gateway says so in its answer; Kafka workers use defaults).
    heartbeat_seconds: float = 10.0
    progress_seconds: float = 5.0
    # The pool's leases lost in the last hour and the leased seconds they were counted over (pool-stats; the
    # gateway adds them to its answer, a Kafka worker reads them itself). None: not known.
    pool_lease_losses_1h: int | None = None
    pool_leased_seconds_1h: float | None = None
    # The job's trace (W3C traceparent) when the job is traced (spotreel/runtime/tracing.py): the worker's spans join it.
    traceparent: str | None = None

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any] | Any) -> "WorkerLease":
        get = answer.get if isinstance(answer, Mapping) else (lambda k, d=None: getattr(answer, k, d))
        missing = object()
        kwargs = {}
        for f in fields(cls):
            value = get(f.name, missing)
            if value is not missing and value is not None:
                kwargs[f.name] = value
        try:
            # A WorkAssigned carries its RenderSpec; the gateway's JSON answer has the spec's fields flat.
            if isinstance(kwargs.get("spec"), Mapping):
                kwargs["spec"] = RenderSpec(**kwargs["spec"])
            elif "spec" not in kwargs:
                kwargs["spec"] = RenderSpec.from_flat(
                    {name: v for name in SPEC_FIELDS if (v := get(name, missing)) is not missing})
            return cls(**kwargs)
        except TypeError as exc:
            raise TransportError(f"malformed lease answer: {exc}") from None


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    pending: bool = False
    reason: str | None = None
    event: str | None = None
    # Instructions the control plane attaches to a heartbeat or progress answer.
    cancel: bool = False
    drain: bool = False
    lease_expires_at_ms: int | None = None
    # The control plane is behind: send the next renewal (heartbeat or progress) no sooner than this.
    renew_in_s: float | None = None


class Transport(Protocol):
    profile: WorkerProfile

    def register(self) -> dict[str, Any]: ...

    def lease(self, wait_seconds: float, draining: bool = False, lease_ttl_ms: int | None = None) -> WorkerLease | None:
        """Long-poll for a lease; None when nothing came before the deadline."""

    def heartbeat(self, lease: WorkerLease) -> Verdict: ...

    def progress(self, lease: WorkerLease, step: int, progress_pct: float, phase: str) -> Verdict: ...

    def checkpoint(self, lease: WorkerLease, key: str, step: int, progress_pct: float, checksum: str,
                   size_bytes: int, duration_ms: int | None = None, fingerprint: str = "") -> Verdict:
        """`duration_ms`: how long writing the checkpoint took (feeds the pool's checkpoint-cost figures);
        `fingerprint`: the environment that wrote it (Renderer.checkpoint_fingerprint; "" the lease's)."""

    def complete(self, lease: WorkerLease, artifact_key: str, checksum: str, size_bytes: int) -> Verdict: ...

    def fail(self, lease: WorkerLease, error_code: str, message: str, retryable: bool = True,
             invalid_checkpoint_key: str | None = None) -> Verdict: ...

    def release(self, lease: WorkerLease, reason: str = "preempted") -> Verdict: ...

    def close(self) -> None: ...


def judge(reason: str | None, detail: str = "", current_epoch: int | None = None, event: str | None = None) -> Verdict:
    """A refusal reason → LeaseLost if it ends the lease, else a refused Verdict."""
    if reason in LEASE_LOST_REASONS:
        raise LeaseLost(reason, detail, current_epoch)
    return Verdict(accepted=False, reason=reason, event=event)
