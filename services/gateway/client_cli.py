"""`spotreel submit | status | watch | get | cancel | jobs`: the public API for people, from a terminal.

Defaults come from the local stack's settings (Settings.gateway_url, Settings.dev_api_key), overridable
with --url / --key (or SPOTREEL_GATEWAY_PORT, SPOTREEL_DEV_API_KEY). Every failure is one line on stderr
and exit code 1; `watch` and `submit --wait` exit 0 only when the video succeeded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, TextIO

from spotreel.services.gateway.client import Client, ClientError
from spotreel.settings import Settings

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "dead_lettered"})
BAR = 30


def _client(args: argparse.Namespace, settings: Settings) -> Client:
    return Client(args.url or settings.gateway_url, args.key or settings.dev_api_key)


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


def follow(client: Client, job_id: str, out: TextIO) -> str:
    """Render the SSE stream until it ends; returns the last status seen."""
    tty = out.isatty()
    status, last = "unknown", None
    for event, data in client.stream(job_id):
        if event != "status":
            continue
        status = data.get("status", status)
        line = progress_line(data)
        if line == last:
            continue
        # On a terminal the bar redraws in place; in a pipe or a log, one line per change.
        out.write(("\r\x1b[2K" + line) if tty else line + "\n")
        out.flush()
        last = line
    if tty:
        out.write("\n")
    return status


def _submit(args: argparse.Namespace, settings: Settings) -> int:
    c = _client(args, settings)
    body: dict[str, Any] = {"prompt": args.prompt}
    for name in ("model", "gpu_type", "duration", "resolution", "fps", "seed", "priority", "num_steps"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    answer = c.submit(body, args.idempotency_key)
    wait = answer.get("estimated_wait_seconds")
    print(f"{answer['job_id']}  {answer['status']}  queue position {answer.get('queue_position')}, "
          f"estimated wait {'unknown' if wait is None else f'{wait} s'}")
    if not args.wait:
        return 0
    status = follow(c, answer["job_id"], sys.stdout)
    return 0 if status == "succeeded" else 1


def _status(args: argparse.Namespace, settings: Settings) -> int:
    v = _client(args, settings).get(args.id)
    if args.json:
        print(json.dumps(v, indent=2))
        return 0
    a = v.get("attempt") or {}
    print(f"{v['id']}  {v['status']}  priority {v.get('priority')}  model {v.get('model')}")
    print(f"  {progress_line(v)}")
    print(f"  attempt: failures {a.get('failures')}/{a.get('max_attempts')}, preemptions {a.get('preemptions')}, "
          f"lease epoch {a.get('lease_epoch')}")
    if v.get("error"):
        print(f"  error: {v['error']}")
    if v.get("result"):
        r = v["result"]
        print(f"  result: {r.get('size_bytes')} bytes, sha256 {r.get('sha256')} (`spotreel get {v['id']} -o out.mp4`)")
    return 0


def _watch(args: argparse.Namespace, settings: Settings) -> int:
    return 0 if follow(_client(args, settings), args.id, sys.stdout) == "succeeded" else 1


def _get(args: argparse.Namespace, settings: Settings) -> int:
    c = _client(args, settings)
    video = c.get(args.id)
    out = Path(args.output or f"{args.id}.mp4")
    _, got = c.download(args.id, out)
    want = (video.get("result") or {}).get("sha256")
    if want and got != want:
        out.unlink(missing_ok=True)
        raise ClientError(f"checksum mismatch: got {got}, the video's is {want}; file removed")
    print(f"{out}: {out.stat().st_size} bytes" + (", sha256 verified" if want else ""))
    return 0


def _cancel(args: argparse.Namespace, settings: Settings) -> int:
    r = _client(args, settings).cancel(args.id)
    print(f"{r['job_id']}: cancel requested (was {r.get('status')})")
    return 0


def _jobs(args: argparse.Namespace, settings: Settings) -> int:
    page = _client(args, settings).jobs(args.status, args.limit)
    videos = page.get("videos", [])
    if not videos:
        print("no videos")
    for v in videos:
        prompt = v.get("prompt") or ""
        print(f"{v['id']}  {v['status']:<13}  {v.get('created_at') or '':<24}  "
              f"{prompt[:50] + ('…' if len(prompt) > 50 else '')}")
    return 0


def _guarded(name: str, fn: Callable[[argparse.Namespace, Settings], int]):
    def run(args: argparse.Namespace, settings: Settings) -> int:
        try:
            return fn(args, settings)
        except ClientError as exc:
            print(f"spotreel {name}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"spotreel {name}: interrupted", file=sys.stderr)
            return 130
    return run


def register(sub: argparse._SubParsersAction) -> None:
    def add(name: str, help_: str, fn) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--url", help="gateway URL (default: the local stack's, Settings.gateway_url)")
        p.add_argument("--key", help="API key (default: the local stack's development key)")
        p.set_defaults(func=_guarded(name, fn))
        return p

    p = add("submit", "submit a video job and print its id", _submit)
    p.add_argument("prompt")
    p.add_argument("--wait", action="store_true", help="follow its progress until it ends (exit 0: succeeded)")
    p.add_argument("--idempotency-key", help="resubmitting with the same key returns the same job")
    for name, kind in (("model", str), ("gpu-type", str), ("duration", float), ("resolution", str), ("fps", int),
                       ("seed", int), ("priority", int), ("num-steps", int)):
        p.add_argument(f"--{name}", type=kind, default=None)
    p = add("status", "a video's status, progress, attempt and result", _status)
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p = add("watch", "a live progress bar until the video ends (exit 0: succeeded)", _watch)
    p.add_argument("id")
    p = add("get", "download a finished video (checksum verified)", _get)
    p.add_argument("id")
    p.add_argument("-o", "--output", help="file to write (default ID.mp4)")
    p = add("cancel", "cancel a video", _cancel)
    p.add_argument("id")
    p = add("jobs", "your videos, newest first", _jobs)
    p.add_argument("--status", help="only videos in this status")
    p.add_argument("--limit", type=int, default=50)
