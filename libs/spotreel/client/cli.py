"""`spotreel submit | status | watch | get | cancel | pause | resume | retry | priority | jobs | events |
attempts | dag submit | schedule …`: the public API for people and scripts, from a terminal.

Defaults come from the local stack's settings (Settings.gateway_url, Settings.dev_api_key), overridable
with --url / --key (or SPOTREEL_GATEWAY_PORT, SPOTREEL_DEV_API_KEY). Every command takes --json: one JSON
document on stdout (the API's answer; on failure `{"error": {"http_status", "code", "message", …}}`).
Exit codes: 0 done, 1 the API refused or could not be reached (one line on stderr with the HTTP status
and the API's error code), 2 a usage error (argparse's own, or a file that cannot be read), 130
interrupted. `watch` and `submit --wait` exit 0 only when the video succeeded.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from spotreel.api.config import GatewayConfig
from spotreel.client import commands as cmds
from spotreel.client import schedules as client_schedules
from spotreel.client.flags import (JOB_STATUSES, PRIORITY_HELP, add_limit_flag, add_video_flags,
                                   add_webhook_events_flag)
from spotreel.client.http import Client, ClientError
from spotreel.client.output import TERMINAL, progress_line
from spotreel.config.settings import Settings

# The demo and tests import these from here, where they lived before the commands were split up.
__all__ = ["TERMINAL", "progress_line", "register"]

Command = Callable[[Client, argparse.Namespace], cmds.CommandResult]


def _client(args: argparse.Namespace, settings: Settings) -> Client:
    return Client(args.url or settings.gateway_url, args.key or settings.dev_api_key)


def _runner(name: str, fn: Command):
    def run(args: argparse.Namespace, settings: Settings) -> int:
        try:
            outcome = fn(_client(args, settings), args)
        except ClientError as exc:
            print(f"spotreel {name}: {exc}", file=sys.stderr)
            if args.json:
                print(json.dumps(exc.as_json(), indent=2))
            return 1
        except cmds.UsageError as exc:
            print(f"spotreel {name}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"spotreel {name}: interrupted", file=sys.stderr)
            return 130
        if args.json:
            print(json.dumps(outcome.doc, indent=2, ensure_ascii=False))
        elif outcome.text:
            print(outcome.text)
        return outcome.code
    return run


def _common(p: argparse.ArgumentParser, name: str, fn: Command) -> argparse.ArgumentParser:
    p.add_argument("--url", help="gateway URL (default: the local stack's, http://127.0.0.1:18700, or "
                                 "SPOTREEL_GATEWAY_PORT's)")
    p.add_argument("--key", help="API key (default: the local stack's development key, SPOTREEL_DEV_API_KEY)")
    p.add_argument("--json", action="store_true", help="print one JSON document (the API's answer) on stdout")
    p.set_defaults(func=_runner(name, fn))
    return p


def _with_id(sub: argparse._SubParsersAction, name: str, help_: str, fn: Command) -> argparse.ArgumentParser:
    p = _common(sub.add_parser(name, help=help_), name, fn)
    p.add_argument("id", help="the video's id (j + 32 hex digits)")
    return p


def _submit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help=f"what the video shows (up to {GatewayConfig().max_prompt_chars} characters)")
    p.add_argument("--wait", action="store_true", help="follow its progress until it ends (exit 0: succeeded)")
    p.add_argument("--idempotency-key", help="1-200 printable ASCII characters; resubmitting with the same key and "
                                             "flags returns the same job (default: a fresh key, printed)")
    add_video_flags(p)
    add_webhook_events_flag(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--run-at", type=cmds.run_at_ms, metavar="TIME", help="start no earlier than this: epoch ms or ISO 8601 "
                                                            "(no offset: UTC)")
    when.add_argument("--delay", type=int, metavar="SECONDS", help="start no earlier than this many seconds from now "
                                                                   f"(0 to {GatewayConfig().max_delay_s})")
    p.add_argument("--parent", action="append", metavar="ID", help="wait for this video (j + 32 hex digits) to "
                                                                   f"succeed first (repeatable, up to {GatewayConfig().max_parents})")
    p.add_argument("--dag-policy", choices=("fail_fast", "continue"),
                   help="with --parent: cancel on a parent's failure (fail_fast) or run once all ended")


def register(sub: argparse._SubParsersAction) -> None:
    p = _common(sub.add_parser("submit", help="submit a video job and print its id"), "submit", cmds.submit)
    _submit_flags(p)
    cmds.add_render_flags(p)
    _with_id(sub, "status", "a video's status, progress, attempt and result", cmds.status)
    _with_id(sub, "watch", "live progress until the video ends, reconnecting where the stream dropped "
                           "(exit 0: succeeded)", cmds.watch)
    p = _with_id(sub, "get", "download a finished video (checksum verified)", cmds.get)
    p.add_argument("-o", "--output", help="file to write (default ID.mp4)")
    _with_id(sub, "cancel", "cancel a video", cmds.lifecycle("cancel"))
    _with_id(sub, "pause", "pause a video (a running one checkpoints and releases its worker first)",
             cmds.lifecycle("pause"))
    _with_id(sub, "resume", "resume a paused video", cmds.lifecycle("resume"))
    _with_id(sub, "retry", "requeue a failed or dead-lettered video with a fresh attempt budget",
             cmds.lifecycle("retry"))
    p = _with_id(sub, "priority", "change a video's priority (its dispatch tier, 0-9)", cmds.priority)
    p.add_argument("priority", type=int, metavar="0-9", help=PRIORITY_HELP)
    p = _common(sub.add_parser("jobs", help="your videos, newest first"), "jobs", cmds.jobs)
    p.add_argument("--status", choices=JOB_STATUSES, help="only videos in this status")
    add_limit_flag(p, "videos")
    p.add_argument("--page-token", help="the next page: the token the previous page printed")
    _with_id(sub, "events", "a video's history: every event, and the commands that were refused", cmds.events)
    _with_id(sub, "attempts", "a video's attempts, one per lease: worker, steps, how it ended", cmds.attempts)
    dag = sub.add_parser("dag", help="videos with dependencies among them (POST /v1/dags)")
    dag_sub = dag.add_subparsers(dest="dag_command", metavar="COMMAND")
    dag_sub.required = True
    p = _common(dag_sub.add_parser("submit", help="submit a DAG from a YAML or JSON file: the body of "
                                                  "POST /v1/dags, {nodes: [{key, prompt, …, parents}], "
                                                  "dag_policy}"), "dag submit", cmds.dag_submit)
    p.add_argument("file")
    p.add_argument("--idempotency-key", help="resubmitting the same file with the same key returns the same "
                                             "videos, and completes a DAG that was cut short")
    client_schedules.register(sub, _common)
