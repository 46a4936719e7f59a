"""`spotreel submit/status/watch/get/cancel/jobs` as real processes against a real gateway (in-process
aiohttp on 127.0.0.1, real Kafka + Cassandra + S3, per-test prefix and keyspace). The job's life is driven
by the domain and projected into Cassandra here (what scheduler and projector would write), so `watch`
sees a deterministic sequence, resuming state included."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from spotreel.adapters.kafka import delete_topics
from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.infra.migrate import migrate
from spotreel.infra.topics import ensure_topics
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.client_cli import progress_line
from spotreel.services.gateway.config import GatewayConfig
from spotreel.services.gateway.tenants import create_tenant
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from tests.integration.test_gateway_api import commands_for
from tests.unit.jobkit import Driver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def cli_settings(settings, unique, cql):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2)
    ensure_topics(s, say=lambda *a, **k: None)
    migrate(cql, unique, say=lambda *_: None)
    yield s
    delete_topics(s)


@pytest_asyncio.fixture(loop_scope="function")
async def server(cli_settings, cql):
    key = create_tenant(cql, "alpha")
    with real_deps(cli_settings, session=cql) as deps:
        srv = TestServer(create_app(cli_settings, deps, GatewayConfig(stream_poll_seconds=0.1)), host="127.0.0.1")
        await srv.start_server()
        try:
            yield str(srv.make_url("")).rstrip("/"), key
        finally:
            await srv.close()


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
    life.apply(lambda: d.grant("w1", pool=ids.pool_key(submit.model, submit.gpu_type)))
    life.apply(lambda: d.progress(25.0, step=5))
    life.apply(lambda: d.checkpoint(8, 40.0))
    life.apply(lambda: d.progress(60.0, step=12))
    await asyncio.sleep(0.8)
    life.apply(lambda: d.release())  # preempted: resumes from the 40% checkpoint
    life.apply(lambda: d.grant("w2", pool=ids.pool_key(submit.model, submit.gpu_type)))
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


def test_progress_line_shows_resuming():
    line = progress_line({"status": "running", "progress": {"percent": 60.0, "resuming": True,
                                                            "message": "resuming from checkpoint at 40%",
                                                            "current_percent": 45.0}})
    assert line.startswith("[" + "#" * 18 + "." * 12 + "]  60.0%  running")
    assert "resuming from checkpoint at 40%, now at 45%" in line
