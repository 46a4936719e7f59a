"""`spotreel schedule create | list | get | pause | resume | delete | occurrences`: /v1/schedules from a
terminal, with --json like the other client commands (cli.py: exit codes, error output)."""

from __future__ import annotations

import argparse
from typing import Any

from spotreel.client.http import Client
from spotreel.client.commands import RENDER_FIELDS, CommandResult, add_render_flags, run_at_ms
from spotreel.client.flags import VIDEO_FIELDS, add_limit_flag, add_video_flags

# Flags of `schedule create` → fields of the schedule's job template (argparse dest → API name).
JOB_FIELDS = {**VIDEO_FIELDS, **RENDER_FIELDS}
SCHEDULE_FIELDS = {"timezone": "timezone", "catch_up": "catch_up", "catch_up_grace": "catch_up_grace_seconds",
                   "catch_up_max_runs": "catch_up_max_runs", "overlap": "overlap", "start_at": "start_at"}


def schedule_text(s: dict[str, Any]) -> str:
    job = s.get("job") or {}
    nxt = s.get("next_occurrence_at") or "-"
    options = ", ".join(f"{name} {job[name]!r}" for name in RENDER_FIELDS.values() if job.get(name) is not None)
    return (f"{s['id']}  {s['status']:<8}  {s.get('cron')!s:<16} {s.get('timezone')!s:<20} next {nxt}\n"
            f"  catch-up {s.get('catch_up')}, overlap {s.get('overlap')}; job: {job.get('prompt')!r}"
            + (f" ({options})" if options else ""))


def list_text(page: dict[str, Any]) -> str:
    items = page.get("schedules", [])
    lines = [schedule_text(s).splitlines()[0] for s in items] or ["no schedules"]
    if page.get("next_page_token"):
        lines.append(f"more: --page-token {page['next_page_token']}")
    return "\n".join(lines)


def occurrences_text(doc: dict[str, Any]) -> str:
    lines = []
    for o in doc.get("occurrences", []):
        if o["status"] == "skipped":
            span = o["occurrence_at"] if o.get("last_occurrence_at") == o["occurrence_at"] else \
                f"{o['occurrence_at']} … {o.get('last_occurrence_at')}"
            lines.append(f"{span}  skipped ({o.get('reason')})")
        else:
            lines.append(f"{o['occurrence_at']}  {o['status']:<13} {o.get('job_id')}" + ("  late" if o.get("late") else ""))
    if doc.get("next_page_token"):
        lines.append(f"more: --page-token {doc['next_page_token']}")
    return "\n".join(lines) or f"no occurrences of {doc.get('schedule_id')} yet"


def command_text(answer: dict[str, Any]) -> str:
    return (f"{answer['schedule_id']}: {answer.get('requested')} requested (was {answer.get('status')}); "
            f"the outcome shows in `spotreel schedule get`")


def create(c: Client, args: argparse.Namespace) -> CommandResult:
    job = {api: getattr(args, dest) for dest, api in JOB_FIELDS.items() if getattr(args, dest) is not None}
    body = {api: getattr(args, dest) for dest, api in SCHEDULE_FIELDS.items() if getattr(args, dest) is not None}
    answer = c.create_schedule({"cron": args.cron, **body, "job": {"prompt": args.prompt, **job}},
                               args.idempotency_key)
    text = f"{answer['schedule_id']}  {answer['status']}" + ("  (replayed)" if answer.get("replayed") else "")
    return CommandResult(answer, text)


def list_(c: Client, args: argparse.Namespace) -> CommandResult:
    page = c.schedules(args.limit, args.page_token)
    return CommandResult(page, list_text(page))


def get(c: Client, args: argparse.Namespace) -> CommandResult:
    s = c.schedule(args.id)
    return CommandResult(s, schedule_text(s))


def occurrences(c: Client, args: argparse.Namespace) -> CommandResult:
    doc = c.schedule_occurrences(args.id, args.limit, args.page_token)
    return CommandResult(doc, occurrences_text(doc))


def lifecycle(action: str):
    def run(c: Client, args: argparse.Namespace) -> CommandResult:
        answer = c.schedule_command(args.id, action)
        return CommandResult(answer, command_text(answer))
    return run


def register(sub: argparse._SubParsersAction, common) -> None:
    """`common(parser, name, fn)`: client_cli's --url/--key/--json and runner."""
    top = sub.add_parser("schedule", help="cron schedules: one video per occurrence (/v1/schedules)")
    ssub = top.add_subparsers(dest="schedule_command", metavar="COMMAND")
    ssub.required = True
    p = common(ssub.add_parser("create", help="create a schedule: CRON (5 fields or @daily…) read in --timezone, "
                                              "one video of PROMPT per occurrence"), "schedule create", create)
    p.add_argument("cron", help='e.g. "30 2 * * *" or @hourly (quote it)')
    p.add_argument("prompt", help="what each occurrence's video shows")
    p.add_argument("--idempotency-key", help="creating again with the same key and flags returns the same schedule")
    p.add_argument("--timezone", help="IANA zone, e.g. Europe/Paris (default UTC). A time in a DST gap runs at the "
                                      "first instant after it; one in an overlap once, at its first occurrence")
    p.add_argument("--catch-up", choices=("skip", "run_once", "run_all"),
                   help="missed occurrences: skip (default), run_once (the latest), run_all (each, up to the max)")
    p.add_argument("--catch-up-grace", type=int, metavar="SECONDS",
                   help="skip: an occurrence at most this late still runs, 0 to 86400 (default 60)")
    p.add_argument("--catch-up-max-runs", type=int, metavar="N",
                   help="run_all: at most N of the latest missed occurrences, 1 to 1000 (default 100)")
    p.add_argument("--overlap", choices=("allow", "skip", "cancel_previous"),
                   help="while an earlier occurrence's video has not ended: allow (default), skip, cancel_previous")
    p.add_argument("--start-at", type=run_at_ms, help="occurrences from this time on: epoch ms or ISO 8601")
    add_video_flags(p)
    add_render_flags(p)
    p = common(ssub.add_parser("list", help="your schedules, newest first"), "schedule list", list_)
    add_limit_flag(p, "schedules")
    p.add_argument("--page-token", help="the next page: the token the previous page printed")

    def with_id(name: str, help_: str, fn) -> argparse.ArgumentParser:
        p = common(ssub.add_parser(name, help=help_), f"schedule {name}", fn)
        p.add_argument("id", help="the schedule's id (s + 32 hex digits)")
        return p

    with_id("get", "a schedule: expression, zone, policies, next occurrence", get)
    with_id("pause", "pause: nothing fires until resumed; occurrences in between are skipped", lifecycle("pause"))
    with_id("resume", "resume a paused schedule", lifecycle("resume"))
    with_id("delete", "delete a schedule (videos already submitted keep running)", lifecycle("delete"))
    p = with_id("occurrences", "past occurrences, newest first: video ids and outcomes, skipped ones and why",
                occurrences)
    add_limit_flag(p, "occurrences")
    p.add_argument("--page-token", help="the next page: the token the previous page printed")
