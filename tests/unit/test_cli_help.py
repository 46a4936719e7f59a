"""The client and operator commands say what they take: every flag of `submit`, `schedule create`, `jobs` and
`priority` has help text, the limits in it are the gateway's own, and no help names code."""

from __future__ import annotations

import argparse
import re

import pytest

from spotreel.cli import build_parser
from spotreel.client.flags import JOB_STATUSES, webhook_events
from spotreel.services.gateway.public.videos import STATUSES

CODE_NAME = re.compile(r"Settings\.|settings\.|\b\w+/\w+\.py\b|\b\w+\.py\b|domain/")


def _sub(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("path", [("submit",), ("schedule", "create"), ("jobs",), ("priority",),
                                  ("tenant", "list"), ("tenant", "disable"), ("worker-key", "list"),
                                  ("worker-key", "revoke"), ("tenant", "webhook-secret")])
def test_every_flag_has_help_without_code_names(path):
    parser = _sub(build_parser(), *path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings or path in (("priority",), ("submit",), ("schedule", "create")):
            assert action.help, f"{' '.join(path)} {action.option_strings or action.dest} has no help"
            assert not CODE_NAME.search(action.help), action.help


def test_the_limits_said_are_the_gateways():
    submit = _sub(build_parser(), "submit")
    helps = {a.dest: a.help for a in submit._actions}
    assert "0 to 9" in helps["priority"] and "1 to 500" in helps["num_steps"] and "at most 60" in helps["duration"]
    assert "1 to 200" in {a.dest: a.help for a in _sub(build_parser(), "jobs")._actions}["limit"]
    assert set(JOB_STATUSES) == STATUSES


def test_the_new_policy_flags_reach_the_body():
    args = build_parser().parse_args(["submit", "p", "--timeout", "600", "--max-attempts", "3", "--backoff-base", "5",
                                      "--backoff-max", "60", "--webhook-events", "started,completed"])
    from spotreel.client.commands import SUBMIT_FIELDS

    body = {api: getattr(args, dest) for dest, api in SUBMIT_FIELDS.items() if getattr(args, dest) is not None}
    assert body == {"timeout_seconds": 600, "max_attempts": 3, "backoff_base_seconds": 5, "backoff_max_seconds": 60,
                    "webhook_events": ["started", "completed"]}
    with pytest.raises(argparse.ArgumentTypeError):
        webhook_events("started,sometimes")
