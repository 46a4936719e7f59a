"""Every `spotreel …` and `make …` line in the READMEs' shell blocks names a command, flags and a make target
that exist: each line is parsed by the real argparse tree (placeholders such as <job-id> filled in, `a|b`
alternatives each tried) and each make target is looked up in the Makefile. A README that documents a
command or flag the code does not have fails here (issue 13: the docs say only what is true). What a
command then does is the business of its own tests; this walks the docs, without a stack."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from spotreel.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/DESIGN.md", "schemas/README.md", "monitoring/README.md", "worker/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("services/*/README.md"))]
PLACEHOLDERS = {"<job-id>": "j" + "0" * 32, "<schedule-id>": "s" + "0" * 32, "<id>": "j" + "0" * 32,
                "NAME": "acme", "DIR": "/tmp/x"}
COMMAND = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S* )*(?:\.venv/bin/)?(spotreel|make) ")


def documented_lines() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        path = ROOT / doc
        if not path.exists():
            continue
        for block in re.findall(r"```(?:sh|bash|shell|console)?\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip()
                if COMMAND.match(line):
                    found.append((doc, line))
    return found


LINES = documented_lines()


def variants(line: str) -> list[list[str]]:
    words = shlex.split(line, comments=True)
    words = [w for w in words if w != "&" and not re.fullmatch(r"[A-Z_]+=\S*", w) and w != "$"]
    words = [PLACEHOLDERS.get(w, w) for w in words]
    out: list[list[str]] = [[]]
    for w in words:
        # `up|down|status`: one command per alternative.
        options = w.split("|") if re.fullmatch(r"[a-z-]+(\|[a-z-]+)+", w) else [w]
        out = [prefix + [o] for prefix in out for o in options]
    return out


def test_the_readmes_hold_commands():
    assert len([line for _, line in LINES if "spotreel" in line]) >= 20


@pytest.mark.parametrize("doc,line", LINES, ids=[f"{d}:{line[:60]}" for d, line in LINES])
def test_each_documented_command_parses(doc, line):
    for argv in variants(line):
        tool, args = argv[0].rsplit("/", 1)[-1], argv[1:]
        if tool == "make":
            makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
            for target in args:
                assert re.search(rf"^{re.escape(target)}\s*:", makefile, re.M), f"{doc}: no make target {target!r}"
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parsed = build_parser().parse_args(args)
        except SystemExit as exc:
            raise AssertionError(f"{doc}: `{line}` does not parse: {err.getvalue().strip()}") from exc
        assert isinstance(parsed, argparse.Namespace)
