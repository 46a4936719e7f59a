"""README.md's client command block, run line by line against a real gateway (in-process aiohttp on
127.0.0.1, real Kafka and Cassandra, per-test prefix and keyspace; the fixtures of test_client_cli.py): every
line must exit 0, `<job-id>` and `<schedule-id>` taken from what `submit` and `schedule create` printed and
`dag.yaml` from README's own YAML block. Lines that need a finished video or the events topic (`watch`, `get`,
`replay`) are only parsed (tests/unit/test_readme_commands.py); they are exercised by test_client_cli.py and
the demo. Commands run in a thread through `spotreel.cli.main`, as the `spotreel` entry point does."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from spotreel.cli import main
from tests.integration import test_client_cli

# Bound here, not imported by name, so that pytest finds the fixtures in this module and the test's own
# parameters do not shadow an import.
cli_settings, make_server, server = test_client_cli.cli_settings, test_client_cli.make_server, test_client_cli.server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
README = Path(__file__).resolve().parents[2] / "README.md"
NEEDS_A_FINISHED_VIDEO = {"watch", "get", "replay"}


def client_block() -> tuple[list[str], str]:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    block = next(b for b in blocks if "spotreel submit" in b)
    dag = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "nodes:" in b)
    return [line for line in block.splitlines() if line.strip().startswith(".venv/bin/spotreel")], dag


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


async def test_readmes_client_commands_run(server, tmp_path):
    url, key = server
    lines, dag = client_block()
    (tmp_path / "dag.yaml").write_text(dag, encoding="utf-8")
    ids: dict[str, str] = {}
    ran = []
    for line in lines:
        argv = shlex.split(line, comments=True)[1:]
        if argv[0] in NEEDS_A_FINISHED_VIDEO:
            continue
        argv = [ids.get(w, str(tmp_path / w) if w == "dag.yaml" else w) for w in argv]
        assert not any(w.startswith("<") for w in argv), f"no value yet for a placeholder in `{line}`"
        code, output = await asyncio.to_thread(run, [*argv, "--url", url, "--key", key])
        assert code == 0, f"`{line}` exited {code}: {output}"
        ran.append(argv[0] if argv[0] not in ("schedule", "dag") else " ".join(argv[:2]))
        if argv[0] == "submit":
            ids["<job-id>"] = output.split()[0]
        elif argv[:2] == ["schedule", "create"]:
            ids["<schedule-id>"] = re.search(r"\bs[0-9a-f]{32}\b", output).group(0)
    assert {"submit", "status", "pause", "priority", "events", "attempts", "jobs", "dag submit", "schedule create",
            "schedule occurrences", "usage"} <= set(ran)
