"""Where the demo's time went and what the job went through, from the job's history (the scheduler's
clock), the worker's event lines (the worker's clock: only differences are used) and what the demo
measured itself. Pure: no I/O, no clock."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

# Events that repeat while a job runs: counted, not listed.
_ROUTINE = {"ProgressReported": "progress reports", "CheckpointRecorded": "checkpoints",
            "LeaseRenewed": "lease renewals"}


def _at(event: dict) -> float | None:
    raw = event.get("occurred_at")
    return datetime.fromisoformat(raw).timestamp() if raw else None


def _first(events: list[dict], kind: str) -> dict | None:
    return next((e for e in events if e.get("type") == kind and not e.get("rejected")), None)


def _between(a: dict | None, b: dict | None) -> float | None:
    start, end = (_at(a) if a else None), (_at(b) if b else None)
    return None if start is None or end is None else max(0.0, end - start)


def queue_wait(events: list[dict]) -> float | None:
    """Submitted → first lease: how long the job waited for a worker."""
    return _between(_first(events, "JobSubmitted"), _first(events, "JobLeased"))


def render_time(events: list[dict]) -> float | None:
    """First lease → success: rendering, resumes included, encoding and the upload."""
    return _between(_first(events, "JobLeased"), _first(events, "JobSucceeded"))


def worker_split(lines: list[dict], job_id: str) -> tuple[float | None, float | None]:
    """(denoising, decode + encode + upload) seconds of the job on the worker, from its event lines."""
    mine = [ln for ln in lines if ln.get("job_id") == job_id]
    leased = next((ln["at"] for ln in mine if ln["event"] == "leased"), None)
    steps = [ln["at"] for ln in mine if ln["event"] == "step"]
    done = next((ln["at"] for ln in mine if ln["event"] == "job"), None)
    denoise = steps[-1] - leased if steps and leased is not None else None
    finish = done - steps[-1] if steps and done is not None else None
    return denoise, finish


def states_passed(statuses: list[str]) -> list[str]:
    out: list[str] = []
    for s in statuses:
        if not out or out[-1] != s:
            out.append(s)
    return out


def history_digest(events: list[dict]) -> str:
    """The lifecycle events in order, the routine ones counted, rejected commands counted apart."""
    lifecycle = [e["type"] for e in events if e.get("type") not in _ROUTINE and not e.get("rejected")]
    routine = Counter(e["type"] for e in events if e.get("type") in _ROUTINE and not e.get("rejected"))
    rejected = sum(1 for e in events if e.get("rejected"))
    extras = [f"{n} {_ROUTINE[kind]}" for kind, n in routine.items()]
    if rejected:
        extras.append(f"{rejected} rejected commands")
    return " → ".join(lifecycle) + (f"  (+ {', '.join(extras)})" if extras else "")


def seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


@dataclass
class Report:
    """Everything the summary prints; filled in as the demo goes."""

    job_id: str = ""
    request: str = ""
    statuses: list[str] = field(default_factory=list)
    resumed: bool = False
    history: list[dict] = field(default_factory=list)
    worker_lines: list[dict] = field(default_factory=list)
    stack_check_s: float | None = None
    worker_start_s: float | None = None
    download_s: float | None = None
    worker_exit_s: float | None = None
    total_s: float | None = None
    video_path: str = ""
    size_bytes: int = 0
    sha256: str = ""
    probe: dict = field(default_factory=dict)
    worker_log: str = ""


def phase_line(r: Report) -> str:
    denoise, finish = worker_split(r.worker_lines, r.job_id)
    queued, rendered = queue_wait(r.history), render_time(r.history)
    render = seconds(rendered)
    if denoise is not None or finish is not None:
        render += f" (denoising {seconds(denoise)}, decode + encode + upload {seconds(finish)})"
    parts = [f"stack check {seconds(r.stack_check_s)}", f"worker start {seconds(r.worker_start_s)}",
             f"queue wait {seconds(queued)}", f"render {render}", f"download + verify {seconds(r.download_s)}",
             f"worker exit {seconds(r.worker_exit_s)}"]
    known = (r.stack_check_s, r.worker_start_s, queued, rendered, r.download_s, r.worker_exit_s)
    if r.total_s is not None and None not in known:
        # Submitting, the read model catching up with the worker's completion, decoding, the history.
        parts.append(f"rest {seconds(max(0.0, r.total_s - sum(known)))}")  # type: ignore[arg-type]
    return " | ".join(parts)


def summary_lines(r: Report, gateway_url: str, api_key: str) -> list[str]:
    p = r.probe
    resumed = "resumed from a checkpoint" if r.resumed else "no resume needed"
    return [
        f"demo: done in {seconds(r.total_s)}",
        f"  job       {r.job_id}  ({r.request})",
        f"  states    {' → '.join(states_passed(r.statuses))}  ({resumed})",
        f"  history   {history_digest(r.history)}",
        f"  phases    {phase_line(r)}",
        f"  video     {r.video_path}",
        f"            {r.size_bytes} bytes, sha256 {r.sha256} (matches the API's)",
        f"            {p.get('codec')}, {p.get('frames')} frames, {p.get('width')}x{p.get('height')}, "
        f"{p.get('fps', 0):g} fps (decoded with PyAV)",
        f"  worker    log {r.worker_log}",
        "  next      spotreel status " + r.job_id + "     # status, progress, attempt, result",
        f"            curl -s -H 'Authorization: Bearer {api_key}' {gateway_url}/v1/videos/{r.job_id}/events"
        "     # the job's full history",
        "            spotreel jobs     # your videos, newest first",
        "            make down     # stop the stack (spotreel infra down)",
    ]
