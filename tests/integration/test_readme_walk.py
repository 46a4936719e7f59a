"""README.md's command blocks, run line by line against a real gateway (in-process aiohttp on 127.0.0.1, real
Kafka and Cassandra, per-test prefix and keyspace; the fixtures of test_client_cli.py, and the local stack's
model registry) and a real scheduler on the same topics: every line must exit 0 and say what it claims.

- the client block: `<job-id>` and `<schedule-id>` taken from what `submit` and `schedule create` printed,
  `dag.yaml` from README's own YAML block. `watch` and `get` need a finished video and are only parsed
  (tests/unit/test_readme_commands.py; test_client_cli.py and the demo run them);
- the operators' block (`model list`, `tenant create|set`, `worker-key create`, `usage`) and the stack
  block's `schemas check` (its other lines start and stop the stack: test_infra_cli.py runs those), through
  SPOTREEL_* variables naming the test's prefix, keyspace and registry as an operator's shell would. Between
  `worker-key create` and `usage` a worker holding that key leases a job of the DAG through the gateway
  and hands it back, so `usage` has GPU-seconds to show and `replay <job-id>` and `replay --why <job-id>` (the
  client block's last lines, run last, on that job) have a lease to tell.

Commands run in a thread through `spotreel.cli.main`, as the `spotreel` entry point does."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from spotreel.cli import main
from spotreel.model_registry import load
from spotreel.platform.seed import local_registry_text
from tests.integration import test_client_cli
from tests.integration.schedkit import SchedulerProc

# Bound here, not imported by name, so that pytest finds the fixtures in this module and the test's own
# parameters do not shadow an import.
cli_settings, make_server = test_client_cli.cli_settings, test_client_cli.make_server
GatewayConfig = test_client_cli.GatewayConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
README = Path(__file__).resolve().parents[2] / "README.md"
NEEDS_A_FINISHED_VIDEO = {"watch", "get"}
RUN_LAST = {"replay"}  # once a job had a lease


def blocks() -> tuple[list[str], list[str], str]:
    """README's client block, its operators' block (with the stack block's one line that changes nothing on
    a stack, `schemas check`; the others start and stop it) and its DAG file."""
    text = README.read_text(encoding="utf-8")
    found = re.findall(r"```sh\n(.*?)```", text, re.S)

    def lines(marker: str) -> list[str]:
        block = next(b for b in found if marker in b)
        return [line for line in block.splitlines() if line.strip().startswith(".venv/bin/spotreel")]

    dag = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "nodes:" in b)
    checks = [line for line in lines("spotreel infra fetch") if " schemas check" in line]
    assert checks, "README's stack block lost `spotreel schemas check`"
    return lines("spotreel submit"), lines("spotreel tenant create") + checks, dag


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def argv_of(line: str, ids: dict[str, str], tmp_path: Path) -> list[str]:
    argv = [ids.get(w, str(tmp_path / w) if w == "dag.yaml" else w) for w in shlex.split(line, comments=True)[1:]]
    assert not any(w.startswith("<") for w in argv), f"no value yet for a placeholder in `{line}`"
    return argv


@pytest.fixture
def scheduler(cli_settings, tmp_path):
    proc = SchedulerProc(cli_settings, tmp_path)
    try:
        proc.wait_owning(set(range(cli_settings.partitions)), timeout=90)
        yield proc
    finally:
        proc.stop()


async def test_readmes_commands_run(cli_settings, make_server, scheduler, tmp_path, monkeypatch):
    registry = tmp_path / "models.toml"
    registry.write_text(local_registry_text(tmp_path), encoding="utf-8")
    url, key = await make_server(GatewayConfig(stream_poll_seconds=0.1, models=load(registry)))
    s = cli_settings
    # What an operator's shell on this stack would hold (the operators' commands read no --url or --key).
    for name, value in {"SPOTREEL_TOPIC_PREFIX": s.topic_prefix, "SPOTREEL_CASSANDRA_KEYSPACE": s.cassandra_keyspace,
                        "SPOTREEL_PARTITIONS": str(s.partitions), "SPOTREEL_MODEL_REGISTRY": str(registry)}.items():
        monkeypatch.setenv(name, value)
    client, operators, dag = blocks()
    (tmp_path / "dag.yaml").write_text(dag, encoding="utf-8")
    ids: dict[str, str] = {}
    ran, last = [], []
    for line in client:
        argv = shlex.split(line, comments=True)[1:]
        if argv[0] in NEEDS_A_FINISHED_VIDEO:
            continue
        if argv[0] in RUN_LAST:
            last.append(line)
            continue
        argv = argv_of(line, ids, tmp_path)
        code, output = await asyncio.to_thread(run, [*argv, "--url", url, "--key", key])
        assert code == 0, f"`{line}` exited {code}: {output}"
        ran.append(argv[0] if argv[0] not in ("schedule", "dag") else " ".join(argv[:2]))
        if argv[0] == "submit":
            ids["<job-id>"] = output.split()[0]
        elif argv[:2] == ["schedule", "create"]:
            ids["<schedule-id>"] = re.search(r"\bs[0-9a-f]{32}\b", output).group(0)
    assert {"submit", "status", "pause", "priority", "events", "attempts", "jobs", "dag submit", "schedule create",
            "schedule occurrences", "usage"} <= set(ran)

    said: dict[str, str] = {}
    for line in operators:
        argv = argv_of(line, ids, tmp_path)
        if argv[0] == "usage":
            said["worker"] = await asyncio.to_thread(lease_and_hand_back, url, said["worker-key"], ids)
            output = await asyncio.to_thread(usage_of, "alpha", argv)
        else:
            code, output = await asyncio.to_thread(run, argv)
            assert code == 0, f"`{line}` exited {code}: {output}"
        said[argv[0] if argv[0] not in ("tenant", "model") else " ".join(argv[:2])] = output
    assert said["model list"].startswith("tiny-t2v  family=unet3d") and "samplers=ddim,euler_a" in said["model list"]
    assert re.search(r"tenant acme: API key .*\n\S{20,}", said["tenant create"]), said["tenant create"]
    assert "weight 2" in said["tenant set"] and "max in flight 8" in said["tenant set"], said["tenant set"]
    assert re.search(r"^\d+ schemas, 0 failing$", said["schemas"], re.M), said["schemas"]
    used = float(re.search(r"^alpha\s+([0-9.]+)", said["usage"], re.M).group(1))
    assert used > 0, said["usage"]

    for line in last:  # replay and replay --why, of the job the worker leased
        code, output = await asyncio.to_thread(run, argv_of(line, ids, tmp_path))
        assert code == 0, f"`{line}` exited {code}: {output}"
        assert said["worker"] in output, f"`{line}` does not name the lease's worker: {output}"
        if "--why" not in line:
            assert "JobLeased" in output and "LeaseReleased" in output, output


def lease_and_hand_back(url: str, worker_key_output: str, ids: dict[str, str]) -> str:
    """A worker with the key `worker-key create` printed leases a job (the DAG's root: the submitted one is
    paused) through the gateway, holds it a second and releases it; the lease's job becomes `<job-id>`."""
    import time

    from spotreel.worker.transport import WorkerProfile
    from spotreel.worker.transport_http import HttpTransport

    worker_key = worker_key_output.strip().splitlines()[-1]
    transport = HttpTransport(url, worker_key, WorkerProfile("readme-worker", "any", ("tiny-t2v",)))
    try:
        transport.register()
        lease = None
        deadline = time.monotonic() + 60
        while lease is None and time.monotonic() < deadline:
            lease = transport.lease(5)
        assert lease is not None, "no lease in 60 s"
        time.sleep(1.0)
        assert transport.release(lease).accepted
    finally:
        transport.close()
    ids["<job-id>"] = lease.job_id
    return lease.worker_id


def usage_of(tenant: str, argv: list[str]) -> str:
    """`spotreel usage` once the scheduler's report of the released lease is on the topic (a report per
    stats tick, 1 s): the line is run until it shows the tenant."""
    import time

    deadline = time.monotonic() + 30
    while True:
        code, output = run(argv)
        assert code == 0, f"`spotreel {' '.join(argv)}` exited {code}: {output}"
        if re.search(rf"^{tenant}\s", output, re.M) or time.monotonic() > deadline:
            return output
        time.sleep(1.0)
