"""docs/SETTINGS.md, the one list of every knob: written from the code, so it cannot drift from it.

Each source is already the single home of its knobs: Settings (SPOTREEL_<NAME>, the comment above each
field), the launcher's DevstackSettings (SPOTREEL_<NAME> too, its own fields), GatewayConfig
(SPOTREEL_GATEWAY_<NAME>, likewise), the projector's, webhook notifier's and janitor's tuning dataclasses
(SPOTREEL_PROJECTOR_/WEBHOOKS_/JANITOR_<NAME>, likewise) and the service commands' options that
spotreel.config.knobs opens to the environment (SPOTREEL_<COMMAND>_<OPTION>, their help). Other variables read
directly (tracing's) are listed in OTHER below. `python -m spotreel.docs.settings` rewrites the file;
`--check` exits 1 when it is out of date; tests/unit/test_settings_catalogue.py runs the check and refuses a
knob without a description or a variable named twice.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from spotreel.config import knobs
from spotreel.runtime import tracing
from spotreel.devstack.settings import DevstackSettings
from spotreel.api.config import ENV_PREFIX as GATEWAY_PREFIX, NOT_FROM_ENV, GatewayConfig
from spotreel.config.settings import Settings

DOC = Path(__file__).resolve().parents[3] / "docs" / "SETTINGS.md"

# Variables read where they are used rather than through one of the three sources.
OTHER = {
    tracing.SAMPLE_ENV: ("0", "Share of new traces sampled (0 to 1); sampled parents are always followed."),
    tracing.OTLP_ENV: ("", "OTLP/HTTP collector the spans go to; empty: the log (logger spotreel.trace)."),
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(f: Field[Any]) -> str:
    if f.default is not MISSING:
        return repr(f.default) if isinstance(f.default, str) else str(f.default)
    factory = f.default_factory
    return (factory.__doc__ or "").strip() if factory is not MISSING else ""


def rows() -> dict[str, list[tuple[str, str, str, str]]]:
    """Section title -> (knob, variable, default, meaning) rows, in the order the code declares them."""
    from spotreel.cli import build_parser

    sections: dict[str, list[tuple[str, str, str, str]]] = {}
    runtime = frozenset(f.name for f in fields(Settings))
    from spotreel.services.janitor import janitor
    from spotreel.services.projector import consumer
    from spotreel.services.webhooks import notifier

    for title, cls, prefix, skip in (("Settings (every process)", Settings, "SPOTREEL_", frozenset()),
                                     ("Local launcher (DevstackSettings, `spotreel infra`)", DevstackSettings,
                                      "SPOTREEL_", runtime),
                                     ("Gateway policy (GatewayConfig)", GatewayConfig, GATEWAY_PREFIX, NOT_FROM_ENV),
                                     ("Projector tuning (ProjectorConfig)", consumer.ProjectorConfig,
                                      consumer.ENV_PREFIX, consumer.NOT_FROM_ENV),
                                     ("Webhook notifier tuning (NotifierConfig, in `spotreel webhooks`)",
                                      notifier.NotifierConfig, notifier.ENV_PREFIX, notifier.NOT_FROM_ENV),
                                     ("Janitor tuning (JanitorConfig, in `spotreel webhooks`)", janitor.JanitorConfig,
                                      janitor.ENV_PREFIX, janitor.NOT_FROM_ENV)):
        notes = knobs.field_comments(cls)
        sections[title] = [(f.name, prefix + f.name.upper(), _default(f), notes.get(f.name, ""))
                           for f in fields(cls) if f.name not in skip]
    for option in knobs.env_options(build_parser()):
        default = option.action.default
        shown = "" if default is None or default is argparse.SUPPRESS else str(default)
        help_text = (option.action.help or "") % {"default": default} if option.action.help else ""
        sections.setdefault(f"`spotreel {option.command}` options", []).append(
            (option.flag, option.env, shown, help_text))
    sections["Other variables"] = [(env, env, default, meaning) for env, (default, meaning) in OTHER.items()]
    return sections


def render() -> str:
    out = ["# Settings", "",
           "Every knob of the spotreel processes, the environment variable that sets it, its default and what it",
           "means. Written by `python -m spotreel.docs.settings` from the code (libs/spotreel/config/settings.py,",
           "libs/spotreel/devstack/settings.py, libs/spotreel/api/config.py and the service commands' options);",
           "do not edit by hand.",
           "tests/unit/test_settings_catalogue.py fails when this file is out of date.", "",
           "A command-line option, where a knob has one, wins over its variable. A value that is not of the knob's",
           "type stops the process at start with the variable's name.", ""]
    for title, table in rows().items():
        out += [f"## {title}", "", "| knob | variable | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{name}` | `{env}` | {f'`{_cell(default)}`' if default else ''} | {_cell(meaning)} |"
                for name, env, default, meaning in table]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spotreel.docs.settings", description=__doc__)
    p.add_argument("--check", action="store_true", help="exit 1 when docs/SETTINGS.md is out of date")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date: run python -m spotreel.docs.settings", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
