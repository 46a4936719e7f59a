"""The client commands (`spotreel submit/status/watch/get/cancel/pause/resume/retry/priority/jobs/events/
attempts/dag submit`) as real processes against a real gateway (in-process aiohttp on 127.0.0.1, real
Kafka + Cassandra + S3, per-test prefix and keyspace), and the SSE stream's resumption over real HTTP.
The job's life is driven by the domain and projected into Cassandra here (what scheduler and projector
would write), so `watch` sees a deterministic sequence, resuming state included; a lifecycle command
the CLI sent is read back from the commands topic and decided, so each test also checks what was sent."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.api import sse
from spotreel.services.gateway.app import create_app
from spotreel.client.cli import progress_line
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_tenant
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from tests.integration.gatewaykit import own_topics_and_keyspace
from tests.integration.test_gateway_api import commands_for
from tests.unit.jobkit import Driver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def cli_settings(settings, unique, cql):
    with own_topics_and_keyspace(settings, unique, cql) as s:
        yield s


@pytest_asyncio.fixture(loop_scope="function")
async def make_server(cli_settings, cql):
    key = create_tenant(cql, "alpha")
    servers = []
    with real_deps(cli_settings, session=cql) as deps:
        async def make(cfg: GatewayConfig) -> tuple[str, str]:
            srv = TestServer(create_app(cli_settings, deps, cfg), host="127.0.0.1")
            await srv.start_server()
            servers.append(srv)
            return str(srv.make_url("")).rstrip("/"), key
        try:
            yield make
        finally:
            for srv in servers:
                await srv.close()


@pytest_asyncio.fixture(loop_scope="function")
async def server(make_server):
    return await make_server(GatewayConfig(stream_poll_seconds=0.1))


async def spotreel(url: str, key: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "spotreel.cli", *args, "--url", url, "--key", key,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


class Life:
    """Decide commands and project their events into the test keyspace."""

    def __init__(self, cql, submit: c.SubmitJob):
        self.d, self.store, self.p = Driver(now=submit.run_at_ms or 1_700_000_000_000), Store(cql), None
        self.apply(lambda: self.d.send(submit))

    def apply(self, step) -> None:
        for event in step():
            self.p, ops = project(self.p, event)
            self.store.write(ops)


async def test_submit_status_watch_get_jobs_cancel(server, cli_settings, cql, s3):
    url, key = server
    code, out, err = await spotreel(url, key, "submit", "a red fox in snow", "--num-steps", "20",
                                    "--idempotency-key", "cli-1")
    assert code == 0, err
    job_id = out.split()[0]
    assert job_id == ids.job_id_for("alpha", "cli-1") and "accepted" in out

    code, out, _ = await spotreel(url, key, "status", job_id)
    assert code == 0 and out.startswith(f"{job_id}  accepted")

    [submit] = commands_for(cli_settings, job_id)
    life = Life(cql, submit)
    d = life.d
    watch = asyncio.create_task(spotreel(url, key, "watch", job_id))
    await asyncio.sleep(2.5)
    life.apply(lambda: d.grant("w1", pool=ids.pool_key(submit.spec.model, submit.gpu_type)))
    life.apply(lambda: d.progress(25.0, step=5))
    life.apply(lambda: d.checkpoint(8, 40.0))
    life.apply(lambda: d.progress(60.0, step=12))
    await asyncio.sleep(0.8)
    life.apply(lambda: d.release())  # preempted: resumes from the 40% checkpoint
    life.apply(lambda: d.grant("w2", pool=ids.pool_key(submit.spec.model, submit.gpu_type)))
    life.apply(lambda: d.progress(45.0, step=9))
    await asyncio.sleep(0.8)
    epoch = d.s.lease.epoch
    video = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4
    artifact = ids.artifact_key(job_id, epoch)
    s3.put_object(Bucket=cli_settings.s3_bucket_artifacts, Key=artifact, Body=video)
    try:
        digest = hashlib.sha256(video).hexdigest()
        life.apply(lambda: d.send(c.CompleteJob("done-1", job_id, epoch, "w2", artifact, digest, len(video))))
        code, out, err = await asyncio.wait_for(watch, 60)
        assert code == 0, out + err
        lines = out.splitlines()
        assert any("running" in ln or "leased" in ln for ln in lines), out
        assert any("resuming from checkpoint at 40%" in ln for ln in lines), out
        assert "100.0%  succeeded" in lines[-1], out

        code, out, _ = await spotreel(url, key, "status", job_id)
        assert code == 0 and "succeeded" in out and digest in out

        target = cql.keyspace  # a per-test name for the file
        path = f"/tmp/{target}.mp4"
        code, out, err = await spotreel(url, key, "get", job_id, "-o", path)
        assert code == 0, err
        assert "sha256 verified" in out and open(path, "rb").read() == video

        code, out, _ = await spotreel(url, key, "jobs")
        assert code == 0 and job_id in out and "succeeded" in out

        code, _, err = await spotreel(url, key, "cancel", job_id)
        assert code == 1 and err.startswith("spotreel cancel: the gateway answered 409 invalid_state")
    finally:
        s3.delete_object(Bucket=cli_settings.s3_bucket_artifacts, Key=artifact)


async def test_clear_one_line_errors(server):
    url, key = server
    code, out, err = await spotreel(url, key, "status", "j" + "0" * 32)
    assert code == 1 and err.strip() == "spotreel status: the gateway answered 404 not_found: no such video"
    code, _, err = await spotreel(url, "wrong-key", "jobs")
    assert code == 1 and err.strip().startswith("spotreel jobs: the gateway answered 401 unauthorized")
    code, _, err = await spotreel("http://127.0.0.1:9", key, "jobs")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "cannot reach the gateway at http://127.0.0.1:9 (Connection refused)" in err


async def test_usage_mine_asks_the_gateway_for_the_keys_tenant(server):
    url, key = server
    code, out, err = await spotreel(url, key, "usage", "--mine", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tenant"] == "alpha" and doc["used_gpu_seconds"] == 0 and doc["leases_held"] == 0
    code, out, _ = await spotreel(url, key, "usage", "--mine")
    assert code == 0 and out.startswith("tenant alpha: used 0.0 GPU-s")


def test_progress_line_shows_resuming():
    line = progress_line({"status": "running", "progress": {"percent": 60.0, "resuming": True,
                                                            "message": "resuming from checkpoint at 40%",
                                                            "current_percent": 45.0}})
    assert line.startswith("[" + "#" * 18 + "." * 12 + "]  60.0%  running")
    assert "resuming from checkpoint at 40%, now at 45%" in line


def new_commands(cli_settings, job_id: str, seen: list) -> list:
    """The commands for the job produced since the last call (the 202 means Kafka has them)."""
    produced = commands_for(cli_settings, job_id)
    fresh = produced[len(seen):]
    seen.extend(fresh)
    return fresh


async def test_lifecycle_history_and_attempts_commands(server, cli_settings, cql):
    url, key = server
    code, out, err = await spotreel(url, key, "submit", "a heron at dawn", "--num-steps", "8", "--priority", "2",
                                    "--idempotency-key", "cli-life", "--json")
    assert code == 0, err
    answer = json.loads(out)
    job_id = answer["job_id"]
    assert job_id == ids.job_id_for("alpha", "cli-life") and answer["status"] == "accepted"
    sent: list = []
    [submit] = new_commands(cli_settings, job_id, sent)
    assert submit.priority == 2
    life = Life(cql, submit)

    async def step(*args: str) -> dict:
        """Run a lifecycle command with --json, decide what it produced, return its answer."""
        code, out, err = await spotreel(url, key, *args, job_id, "--json")
        assert code == 0, err
        [command] = new_commands(cli_settings, job_id, sent)
        life.apply(lambda: life.d.send(command))
        return json.loads(out) | {"sent": type(command).__name__}

    paused = await step("pause")
    assert paused["requested"] == "pause" and paused["status"] == "queued" and paused["sent"] == "PauseJob"
    assert (await status_json(url, key, job_id))["status"] == "paused"
    code, out, _ = await spotreel(url, key, "resume", job_id)  # the text form, decided like the others
    [resume] = new_commands(cli_settings, job_id, sent)
    life.apply(lambda: life.d.send(resume))
    assert code == 0 and out.startswith(f"{job_id}: resume requested (was paused)")
    code, out, err = await spotreel(url, key, "priority", job_id, "7", "--json")
    assert code == 0, err
    [repri] = new_commands(cli_settings, job_id, sent)
    assert type(repri).__name__ == "Reprioritize" and repri.priority == 7
    life.apply(lambda: life.d.send(repri))
    view = await status_json(url, key, job_id)
    assert view["status"] == "queued" and view["priority"] == 7

    life.apply(lambda: life.d.grant("w-cli", pool=ids.pool_key(submit.spec.model, submit.gpu_type)))
    life.apply(lambda: life.d.progress(50.0, step=4))
    life.apply(lambda: life.d.fail(retryable=False))
    assert (await status_json(url, key, job_id))["status"] == "failed"
    retried = await step("retry")
    assert retried["requested"] == "retry" and retried["status"] == "failed" and retried["sent"] == "RequeueJob"
    assert (await status_json(url, key, job_id))["status"] == "queued"

    code, out, err = await spotreel(url, key, "events", job_id, "--json")
    assert code == 0, err
    types = [e["type"] for e in json.loads(out)["events"]]
    assert types[:2] == ["JobSubmitted", "JobQueued"] and "JobPaused" in types and "JobResumed" in types
    assert types[-2:] == ["JobFailed", "JobRequeued"]
    code, out, _ = await spotreel(url, key, "events", job_id)
    assert code == 0 and len(out.splitlines()) == len(types) and out.startswith("v1 ")
    code, out, err = await spotreel(url, key, "attempts", job_id, "--json")
    assert code == 0, err
    [attempt] = json.loads(out)["attempts"]
    assert attempt["worker_id"] == "w-cli" and attempt["status"] == "failed" and attempt["last_step"] == 4
    code, out, _ = await spotreel(url, key, "attempts", job_id)
    assert code == 0 and out.startswith("epoch 1") and "worker w-cli" in out and "steps 0→4" in out

    cancelled = await step("cancel")
    assert cancelled["sent"] == "CancelJob" and (await status_json(url, key, job_id))["status"] == "cancelled"
    code, out, err = await spotreel(url, key, "jobs", "--limit", "1", "--json")
    assert code == 0 and [v["id"] for v in json.loads(out)["videos"]] == [job_id], err

    # Refusals: exit 1, one line with the HTTP status and the API's code, the error document with --json.
    code, out, err = await spotreel(url, key, "retry", job_id, "--json")
    assert code == 1 and err.strip().startswith("spotreel retry: the gateway answered 409 invalid_state: ")
    refused = json.loads(out)["error"]
    assert (refused["http_status"], refused["code"], refused["video_status"]) == (409, "invalid_state", "cancelled")
    code, _, err = await spotreel(url, key, "priority", job_id, "12")
    assert code == 1 and "422 invalid_field" in err and "(field priority)" in err
    assert new_commands(cli_settings, job_id, sent) == []
    # Usage errors: exit 2, nothing sent.
    code, _, err = await spotreel(url, key, "priority", job_id, "high")
    assert code == 2 and "invalid int value" in err
    code, _, err = await spotreel(url, key, "submit", "x", "--run-at", "tomorrow")
    assert code == 2 and "neither epoch milliseconds nor an ISO 8601 time" in err


async def status_json(url: str, key: str, job_id: str) -> dict:
    code, out, err = await spotreel(url, key, "status", job_id, "--json")
    assert code == 0, err
    return json.loads(out)


async def test_dag_submit_from_yaml_and_json(server, cli_settings, tmp_path):
    url, key = server
    (tmp_path / "dag.yaml").write_text(
        "dag_policy: continue\n"
        "nodes:\n"
        "  - key: intro\n    prompt: a title card\n    num_steps: 4\n"
        "  - key: body\n    prompt: a fox in snow\n    parents: [intro]\n")
    code, out, err = await spotreel(url, key, "dag", "submit", str(tmp_path / "dag.yaml"),
                                    "--idempotency-key", "cli-dag", "--json")
    assert code == 0, err
    answer = json.loads(out)
    intro, body = (ids.job_id_for("alpha", f"cli-dag/{k}") for k in ("intro", "body"))
    assert answer["order"] == ["intro", "body"] and answer["dag_policy"] == "continue"
    assert [v["job_id"] for v in answer["videos"]] == [intro, body]
    [child] = commands_for(cli_settings, body)
    assert child.parents == (intro,) and child.dag_policy == "continue"

    (tmp_path / "again.json").write_text(json.dumps({"nodes": [{"key": "intro", "prompt": "a title card",
                                                                "num_steps": 4}, {"key": "body", "prompt":
                                                                "a fox in snow", "parents": ["intro"]}],
                                                     "dag_policy": "continue"}))
    code, out, err = await spotreel(url, key, "dag", "submit", str(tmp_path / "again.json"),
                                    "--idempotency-key", "cli-dag")
    assert code == 0, err
    assert out.splitlines()[0] == "dag cli-dag  policy continue  2 videos"
    assert any(ln.split()[:2] == ["intro", intro] and ln.endswith("(replayed)") for ln in out.splitlines()), out

    (tmp_path / "cycle.json").write_text(json.dumps({"nodes": [{"key": "a", "prompt": "p", "parents": ["b"]},
                                                               {"key": "b", "prompt": "p", "parents": ["a"]}]}))
    code, _, err = await spotreel(url, key, "dag", "submit", str(tmp_path / "cycle.json"))
    assert code == 1 and err.startswith("spotreel dag submit: the gateway answered 422 invalid_dag")
    (tmp_path / "bad.yaml").write_text("nodes: [unclosed\n")
    code, _, err = await spotreel(url, key, "dag", "submit", str(tmp_path / "bad.yaml"))
    assert code == 2 and "is not valid YAML" in err and len(err.strip().splitlines()) == 1
    code, _, err = await spotreel(url, key, "dag", "submit", str(tmp_path / "missing.json"))
    assert code == 2 and err.startswith("spotreel dag submit: cannot read")


async def read_messages(resp, until, timeout: float = 20.0) -> list[sse.Message]:
    """SSE messages of an open response until `until(message)` is true (that one included)."""
    got, block = [], []
    while True:
        line = await asyncio.wait_for(resp.content.readline(), timeout)
        assert line, f"the stream ended after {got}"
        block.append(line)
        if line.strip():
            continue
        got += list(sse.parse(block))
        block = []
        if got and until(got[-1]):
            return got


async def test_stream_resumes_from_last_event_id_exactly_once(server, cli_settings, cql):
    url, key = server
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        r = await http.post(f"{url}/v1/videos", json={"prompt": "a lighthouse", "num_steps": 10},
                            headers={"Idempotency-Key": "cli-sse"})
        job_id = (await r.json())["job_id"]
        [submit] = commands_for(cli_settings, job_id)
        life = Life(cql, submit)
        d = life.d
        pool = ids.pool_key(submit.spec.model, submit.gpu_type)
        stream_url = f"{url}/v1/videos/{job_id}/stream"

        # First connection: the job until it runs, then the client drops the connection.
        first = await http.get(stream_url)
        life.apply(lambda: d.grant("w1", pool=pool))
        life.apply(lambda: d.progress(20.0, step=2))
        before = await read_messages(first, lambda m: m.data.get("status") == "running")
        first.close()
        last_id = before[-1].id
        assert all(m.id == str(m.data["version"]) for m in before)

        # While nobody listens: more progress, a checkpoint, a pause that the worker confirms.
        life.apply(lambda: d.progress(40.0, step=4))
        life.apply(lambda: d.checkpoint(4, 40.0))
        life.apply(lambda: d.pause())
        life.apply(lambda: d.release())
        paused_at = str(d.s.version)

        # Reconnect from the last id: the state now (paused), once, and nothing already seen.
        second = await http.get(stream_url, headers={"Last-Event-ID": last_id})
        [now] = await read_messages(second, lambda m: True)
        assert (now.id, now.data["status"]) == (paused_at, "paused")
        second.close()

        # Reconnect with the id of the state the client has: silence until something new happens.
        third = await http.get(stream_url, headers={"Last-Event-ID": paused_at})
        with pytest.raises(asyncio.TimeoutError):
            await read_messages(third, lambda m: True, timeout=1.0)
        life.apply(lambda: d.resume())
        life.apply(lambda: d.cancel())
        after = await read_messages(third, lambda m: m.event == "end")
        third.close()

    seen = [m.id for m in before + [now] + after if m.event == "status"]
    assert len(seen) == len(set(seen)) and [int(i) for i in seen] == sorted(int(i) for i in seen)
    assert after[-2].data["status"] == "cancelled" and after[-1].id == str(d.s.version)
    assert all(int(m.id) > int(paused_at) for m in after)


async def test_watch_reconnects_through_stream_ends(make_server, cli_settings, cql):
    # The gateway ends every stream after a second: `watch` must resume from its last id each time.
    url, key = await make_server(GatewayConfig(stream_poll_seconds=0.1, stream_max_seconds=1.0))
    code, out, err = await spotreel(url, key, "submit", "a kite", "--idempotency-key", "cli-watch", "--json")
    assert code == 0, err
    job_id = json.loads(out)["job_id"]
    [submit] = commands_for(cli_settings, job_id)
    life = Life(cql, submit)
    watch = asyncio.create_task(spotreel(url, key, "watch", job_id, "--json"))
    await asyncio.sleep(3.0)
    life.apply(lambda: life.d.pause())
    await asyncio.sleep(2.0)
    life.apply(lambda: life.d.cancel())
    code, out, err = await asyncio.wait_for(watch, 60)
    doc = json.loads(out)
    assert code == 1, err  # cancelled, not succeeded
    assert doc["status"] == "cancelled" and doc["reconnects"] >= 2
    assert doc["last_event_id"] == str(life.d.s.version) == str(doc["video"]["version"])
