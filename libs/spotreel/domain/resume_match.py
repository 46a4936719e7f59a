"""Which checkpoint a worker can resume from, and when dispatch waits for a worker that can use the newest.

A resume is exact only on the numerical environment that wrote the checkpoint: the same model family and
weights, loop version, torch and diffusers builds, device kind (and GPU model or CPU thread count), dtype and
VAE tiling rule (worker/render_loop.py `Renderer.environment`). A worker states that environment as its
*fingerprint* when it asks for work (`RequestWork.fingerprint`); the lease keeps it, and every checkpoint
recorded under the lease carries its writer's (`CheckpointRecorded.fingerprint`).

The format is `key=value` pairs joined by `;`, keys sorted (`encode`), so a difference can be named by key
(`differences`). A worker can use a checkpoint when every field it states has the checkpoint's value: a
worker serving one model states that model's family, weights and dtype with its environment; one serving
several states its environment alone (which model a lease brings is not known when it asks), and its own
load check (the render fingerprint in the checkpoint file) judges the rest. The writer of a checkpoint
states everything (`RecordCheckpoint.fingerprint`; the lease's when it gives none). An empty fingerprint is
unknown (a checkpoint recorded, or a worker built, before fingerprints): it matches anything, as every
resume did before.

- **Grant** (`choose_resume`): the lease resumes from the newest checkpoint whose fingerprint matches the
  worker's; newer ones it cannot use are skipped (and kept: a matching worker may take them later), and
  without any usable one it starts at step 0. Nothing is spent: no attempt, no failure towards poison. The
  JobLeased records the choice (`resume_reason`, the skipped keys, a one-line detail).
- **Dispatch** (`hold_for_match`): a worker whose fingerprint does not match the job's newest checkpoint is
  not given the job while another idle worker of the pool that does match is present, for at most
  `hold_ms` of the job's wait; after that any worker takes it. A preference, never a constraint that could
  starve the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spotreel.domain.state import Checkpoint


class ResumeReason:
    """JobLeased.resume_reason."""

    NO_CHECKPOINT = "no_checkpoint"  # nothing recorded: step 0
    NEWEST = "newest"  # the newest checkpoint
    OLDER = "older_compatible"  # newer checkpoints were made elsewhere; the newest this worker can use
    NONE_COMPATIBLE = "none_compatible"  # no checkpoint this worker can use: step 0


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace(";", "%3B").replace("=", "%3D")


def _unescape(value: str) -> str:
    return value.replace("%3D", "=").replace("%3B", ";").replace("%25", "%")


def encode(fields: Mapping[str, object]) -> str:
    """The canonical fingerprint of `fields`: `key=value` pairs, keys sorted, `;` between them."""
    return ";".join(f"{_escape(str(k))}={_escape(str(v))}" for k, v in sorted(fields.items()))


def parse(fingerprint: str) -> dict[str, str]:
    """The fields of a fingerprint; a part without `=` is kept whole under its own text as key."""
    out: dict[str, str] = {}
    for part in fingerprint.split(";") if fingerprint else ():
        key, sep, value = part.partition("=")
        out[_unescape(key)] = _unescape(value) if sep else ""
    return out


def compatible(checkpoint_fp: str, worker_fp: str) -> bool:
    """A worker of `worker_fp` can resume exactly from a checkpoint of `checkpoint_fp` (unknown: yes): every
    field the worker states has the checkpoint's value."""
    if not checkpoint_fp or not worker_fp or checkpoint_fp == worker_fp:
        return True
    return not differences(checkpoint_fp, worker_fp)


def differences(checkpoint_fp: str, worker_fp: str) -> tuple[str, ...]:
    """The fields the worker states whose value the checkpoint does not have (missing there included), sorted."""
    a, b = parse(checkpoint_fp), parse(worker_fp)
    return tuple(sorted(k for k, v in b.items() if a.get(k) != v))


@dataclass(frozen=True)
class ResumeChoice:
    checkpoint: Checkpoint | None
    reason: str
    skipped: tuple[Checkpoint, ...] = ()  # newer than the chosen one (or every one, at step 0), unusable here

    def detail(self, worker_fp: str) -> str | None:
        """One line for the history: what was skipped and which fields differ; None when nothing was."""
        if not self.skipped:
            return None
        parts = [f"{cp.key} (step {cp.step}: {', '.join(differences(cp.fingerprint, worker_fp)) or 'fingerprint'})"
                 for cp in self.skipped]
        start = f"step {self.checkpoint.step}" if self.checkpoint is not None else "step 0"
        return f"resumed from {start}; skipped {len(parts)} checkpoint(s) made elsewhere: " + "; ".join(parts)


def choose_resume(checkpoints: Iterable[Checkpoint], worker_fp: str) -> ResumeChoice:
    """The checkpoint a lease for a worker of `worker_fp` resumes from (`checkpoints` in step order, as
    JobState keeps them): the newest compatible one, with the newer ones it skipped."""
    ordered = tuple(checkpoints)
    if not ordered:
        return ResumeChoice(None, ResumeReason.NO_CHECKPOINT)
    for i in range(len(ordered) - 1, -1, -1):
        if compatible(ordered[i].fingerprint, worker_fp):
            skipped = ordered[i + 1:]
            return ResumeChoice(ordered[i], ResumeReason.OLDER if skipped else ResumeReason.NEWEST, skipped)
    return ResumeChoice(None, ResumeReason.NONE_COMPATIBLE, ordered)


def hold_for_match(newest: Checkpoint | None, worker_fp: str, idle_fps: Iterable[str], waited_ms: int,
                   hold_ms: int) -> bool:
    """Whether dispatch should keep a job from a worker of `worker_fp` for now: its newest checkpoint does not
    match that worker, another idle worker of the pool (`idle_fps`) does, and the job has waited less than
    `hold_ms` (0: never hold)."""
    if hold_ms <= 0 or newest is None or not newest.fingerprint or waited_ms >= hold_ms:
        return False
    if compatible(newest.fingerprint, worker_fp):
        return False
    return any(fp and compatible(newest.fingerprint, fp) for fp in idle_fps)
