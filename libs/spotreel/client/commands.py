"""The client commands themselves: each takes the API client and its arguments and returns a `CommandResult`,
the JSON document for `--json` and the text for a person; cli.py parses and prints."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spotreel.client import output as show
from spotreel.api.submission import ALL_SAMPLERS
from spotreel.domain import limits
from spotreel.client.http import Client, ClientError
from spotreel.client.watch import Watch, follow, watch_json


class UsageError(Exception):
    """The command line or a file it names is wrong: exit 2, nothing was sent."""


@dataclass(frozen=True)
class CommandResult:
    doc: Any  # printed with --json: the API's answer, or a document built from it
    text: str = ""  # printed otherwise; empty when the command printed as it went (watch)
    code: int = 0


# Flags of `submit` → fields of POST /v1/videos (argparse dest → API name).
SUBMIT_FIELDS = {"model": "model", "gpu_type": "gpu_type", "duration": "duration", "resolution": "resolution",
                 "fps": "fps", "seed": "seed", "priority": "priority", "num_steps": "num_steps",
                 "callback_url": "callback_url", "run_at": "run_at", "delay": "delay_seconds",
                 "parent": "parents", "dag_policy": "dag_policy", "guidance_scale": "guidance_scale",
                 "negative_prompt": "negative_prompt", "sampler": "sampler", "timeout": "timeout_seconds",
                 "max_attempts": "max_attempts", "backoff_base": "backoff_base_seconds",
                 "backoff_max": "backoff_max_seconds", "webhook_events": "webhook_events"}
RENDER_FIELDS = {"guidance_scale": "guidance_scale", "negative_prompt": "negative_prompt", "sampler": "sampler"}


def add_render_flags(p: argparse.ArgumentParser) -> None:
    """A job's render options (default: the model's, from the registry; `spotreel model list` shows them), the
    same flags for `submit` and `schedule create`."""
    p.add_argument("--guidance-scale", type=float, metavar="SCALE",
                   help=f"classifier-free guidance, {limits.MIN_GUIDANCE_SCALE:g} (off) to "
                        f"{limits.MAX_GUIDANCE_SCALE:g} (default: the model's)")
    p.add_argument("--negative-prompt", help="what the video should not show (takes effect with guidance > 1)")
    p.add_argument("--sampler", help=f"denoising sampler, one of the model family's ({', '.join(ALL_SAMPLERS)} "
                                     "across families; `spotreel model list` shows each model's; default: the "
                                     "model's)")


def run_at_ms(value: str) -> int:
    """--run-at: epoch milliseconds (what the API takes) or an ISO 8601 time; without an offset it is UTC,
    so the same command means the same instant on every machine."""
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is neither epoch milliseconds nor an ISO 8601 time "
                                         "(e.g. 2026-12-01T09:30:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def _waited(c: Client, job_id: str, quiet: bool) -> tuple[Watch, int]:
    watch = Watch(c, job_id)
    status = follow(watch, None if quiet else sys.stdout)
    return watch, 0 if status == "succeeded" else 1


def submit(c: Client, args: argparse.Namespace) -> CommandResult:
    body = {api: getattr(args, dest) for dest, api in SUBMIT_FIELDS.items() if getattr(args, dest) is not None}
    answer = c.submit({"prompt": args.prompt, **body}, args.idempotency_key)
    if not args.json:  # on stderr: stdout stays the one line scripts read the id from
        for w in answer.get("warnings") or []:
            print(f"spotreel submit: warning: {w.get('message')}", file=sys.stderr)
    if not args.wait:
        return CommandResult(answer, show.submitted_text(answer))
    if not args.json:  # the id first, so a person can act on it while the bar runs
        print(show.submitted_text(answer), flush=True)
    watch, code = _waited(c, answer["job_id"], args.json)
    return CommandResult({**answer, "final": watch_json(watch)}, "", code)


def status(c: Client, args: argparse.Namespace) -> CommandResult:
    v = c.get(args.id)
    return CommandResult(v, show.status_text(v))


def watch(c: Client, args: argparse.Namespace) -> CommandResult:
    w, code = _waited(c, args.id, args.json)
    return CommandResult(watch_json(w), "", code)


def get(c: Client, args: argparse.Namespace) -> CommandResult:
    video = c.get(args.id)
    out = Path(args.output or f"{args.id}.mp4")
    size, got = c.download(args.id, out)
    want = (video.get("result") or {}).get("sha256")
    if want and got != want:
        out.unlink(missing_ok=True)
        raise ClientError(f"checksum mismatch: got {got}, the video's is {want}; file removed")
    doc = {"job_id": args.id, "path": str(out), "size_bytes": size, "sha256": got, "verified": bool(want)}
    return CommandResult(doc, f"{out}: {size} bytes" + (", sha256 verified" if want else ""))


def lifecycle(action: str):
    """cancel, pause, resume, retry: one POST each, acknowledged once Kafka has the command."""
    def run(c: Client, args: argparse.Namespace) -> CommandResult:
        answer = getattr(c, action)(args.id)
        return CommandResult(answer, show.command_text(answer))
    return run


def priority(c: Client, args: argparse.Namespace) -> CommandResult:
    answer = c.set_priority(args.id, args.priority)
    return CommandResult(answer, show.command_text(answer) + f"; new priority {args.priority}")


def jobs(c: Client, args: argparse.Namespace) -> CommandResult:
    page = c.jobs(args.status, args.limit, args.page_token)
    return CommandResult(page, show.jobs_text(page))


def events(c: Client, args: argparse.Namespace) -> CommandResult:
    doc = c.history(args.id)
    return CommandResult(doc, show.history_text(doc))


def attempts(c: Client, args: argparse.Namespace) -> CommandResult:
    doc = c.attempts(args.id)
    return CommandResult(doc, show.attempts_text(doc))


def my_usage(c: Client, args: argparse.Namespace) -> CommandResult:
    doc = c.usage()
    text = (f"tenant {doc.get('tenant')}: used {doc.get('used_gpu_seconds', 0):.1f} GPU-s (wasted "
            f"{doc.get('wasted_gpu_seconds', 0):.1f}), fair share "
            f"{doc.get('fair_share_gpu_seconds', 0):.1f} GPU-s, leases held {doc.get('leases_held', 0)}")
    if doc.get("as_of") is None:
        text += " (no usage reported yet)"
    return CommandResult(doc, text)


def load_dag(path: Path) -> dict[str, Any]:
    """The body of POST /v1/dags from a JSON or YAML file (YAML needs PyYAML; JSON never does)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if path.suffix.lower() == ".json":
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
    else:
        try:
            import yaml
        except ImportError:
            raise UsageError(f"reading {path} as YAML needs PyYAML (pip install pyyaml); "
                             "or give the DAG as a .json file") from None
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(body, dict):
        raise UsageError(f"{path} must hold a mapping with 'nodes' (and optionally 'dag_policy'), "
                         "the body of POST /v1/dags")
    try:
        json.dumps(body)
    except (TypeError, ValueError) as exc:  # YAML dates and the like have no JSON form; quote them
        raise UsageError(f"{path} holds a value JSON cannot carry ({exc}); quote it") from None
    return body


def dag_submit(c: Client, args: argparse.Namespace) -> CommandResult:
    answer = c.submit_dag(load_dag(Path(args.file)), args.idempotency_key)
    return CommandResult(answer, show.dag_text(answer))
