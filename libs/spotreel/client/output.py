"""What the client commands print for a person; `--json` prints the API's own documents instead
(cli.py). One line per video, event or attempt, so the text output also greps well."""

from __future__ import annotations

from typing import Any

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "dead_lettered"})
BAR = 30


def progress_line(snap: dict[str, Any]) -> str:
    """One line: bar, percent, status, and the honest resuming state."""
    p = snap.get("progress") or {}
    pct = float(p.get("percent") or 0.0)
    filled = int(round(BAR * min(100.0, max(0.0, pct)) / 100))
    line = f"[{'#' * filled}{'.' * (BAR - filled)}] {pct:5.1f}%  {snap.get('status', '?')}"
    if p.get("resuming"):
        line += f"  ({p.get('message') or 'resuming from checkpoint'}, now at {p.get('current_percent', 0):.0f}%)"
    elif p.get("phase") and snap.get("status") in ("leased", "running"):
        line += f"  {p['phase']} step {p.get('step', 0)}/{p.get('total_steps', 0)}"
    if snap.get("error"):
        line += f"  error: {snap['error']}"
    return line


def status_text(v: dict[str, Any]) -> str:
    a = v.get("attempt") or {}
    lines = [f"{v['id']}  {v['status']}  priority {v.get('priority')}  model {v.get('model')}",
             f"  {progress_line(v)}",
             f"  attempt: failures {a.get('failures')}/{a.get('max_attempts')}, preemptions {a.get('preemptions')}, "
             f"lease epoch {a.get('lease_epoch')}"]
    if v.get("pause_requested") or v.get("cancel_requested"):
        asked = [w for w in ("pause", "cancel") if v.get(f"{w}_requested")]
        lines.append(f"  requested: {', '.join(asked)} (the worker stops at its next report)")
    if v.get("error"):
        lines.append(f"  error: {v['error']}")
    if v.get("result"):
        r = v["result"]
        lines.append(f"  result: {r.get('size_bytes')} bytes, sha256 {r.get('sha256')} "
                     f"(`spotreel get {v['id']} -o out.mp4`)")
    return "\n".join(lines)


def submitted_text(answer: dict[str, Any]) -> str:
    wait = answer.get("estimated_wait_seconds")
    return (f"{answer['job_id']}  {answer['status']}  queue position {answer.get('queue_position')}, "
            f"estimated wait {'unknown' if wait is None else f'{wait} s'}")


def jobs_text(page: dict[str, Any]) -> str:
    videos = page.get("videos", [])
    lines = [] if videos else ["no videos"]
    for v in videos:
        prompt = v.get("prompt") or ""
        lines.append(f"{v['id']}  {v['status']:<13}  {v.get('created_at') or '':<24}  "
                     f"{prompt[:50] + ('…' if len(prompt) > 50 else '')}")
    if page.get("next_page_token"):
        lines.append(f"more: --page-token {page['next_page_token']}")
    return "\n".join(lines)


def history_text(doc: dict[str, Any]) -> str:
    """Rejected commands are marked: they changed nothing, but say why a request had no effect."""
    lines = [f"v{e.get('version', 0):<4} {e.get('occurred_at') or '-':<24}  "
             f"{'rejected  ' if e.get('rejected') else ''}{e.get('summary') or e.get('type')}"
             for e in doc.get("events", [])]
    return "\n".join(lines) or f"no events for {doc.get('job_id')} yet"


def attempts_text(doc: dict[str, Any]) -> str:
    lines = []
    for a in doc.get("attempts", []):
        steps = f"steps {a.get('start_step')}→{a.get('last_step')}" if a.get("start_step") is not None else "no steps"
        lines.append(f"epoch {a.get('lease_epoch'):<3} {a.get('status') or '?':<10} worker {a.get('worker_id') or '-'}"
                     f"  {steps}  {a.get('started_at') or '-'} → {a.get('ended_at') or '…'}"
                     + (f"  ({a['reason']})" if a.get("reason") else ""))
    return "\n".join(lines) or f"no attempts for {doc.get('job_id')} yet (no lease was granted)"


def command_text(answer: dict[str, Any]) -> str:
    """A lifecycle command is acknowledged, not yet judged: the scheduler may still refuse it, and says so
    in the job's history (`spotreel events`)."""
    return (f"{answer['job_id']}: {answer.get('requested')} requested (was {answer.get('status')}); "
            f"the outcome shows in `spotreel status` / `spotreel events`")


def dag_text(answer: dict[str, Any]) -> str:
    lines = [f"dag {answer.get('idempotency_key')}  policy {answer.get('dag_policy')}  "
             f"{len(answer.get('videos', []))} videos"]
    for v in answer.get("videos", []):
        lines.append(f"  {v['key']:<20} {v['job_id']}  {v['status']}" + ("  (replayed)" if v.get("replayed") else ""))
    return "\n".join(lines)
