"""Crypto-shredding end to end on the real servers: videos submitted through the gateway (in process, real
Kafka, Cassandra and S3), a real scheduler (subprocess) and the projector; then DELETE /v1/videos/{id} of a
leased and a queued video. Afterwards the prompts, negative prompts and callback URLs are in nothing kept:
not in the raw bytes of any of the run's topics (commands, events, the scheduler's changelogs), not in any
table of the keyspace, and the objects are gone from the buckets; their data keys are gone, so the sealed
fields on the log cannot be opened. Replaying the events topic into the read models and folding it into the
scheduler's state still work and agree. No key material (data keys, KEK) is in the topics, the tables, the
scheduler's log, the gateway's log or its metrics."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import generate_latest

from spotreel.api.config import GatewayConfig
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.personal.vault import Erased
from spotreel.platform.migrate import migrate
from spotreel.platform.s3 import s3_client
from spotreel.platform.topics import ensure_topics
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.context import GATEWAY
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.projector.service import build
from spotreel.services.scheduler import replay
from spotreel.tenancy import create_tenant
from tests.integration.projector_kit import dump
from tests.integration.schedkit import GPU, Bus, SchedulerProc, drop_topics, make_topics
from tests.integration.test_gateway_api import auth, commands_for

pytestmark = pytest.mark.integration

TOKEN = uuid.uuid4().hex[:10]
SECRETS = {name: f"{name}-{TOKEN}" for name in ("lighthouse", "fogbank", "hookpath")}


def _body(n: int) -> dict:
    return {"prompt": f"a {SECRETS['lighthouse']} number {n} at dusk", "negative_prompt": f"{SECRETS['fogbank']} {n}",
            "callback_url": f"https://hooks.example.test/{SECRETS['hookpath']}/{n}", "duration": 1, "fps": 8,
            "resolution": "64x64", "num_steps": 4, "seed": n, "gpu_type": GPU}


@pytest.fixture
def plane(settings, unique, cql, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2,
                kek_file=str(tmp_path / "kek"))
    make_topics(s)
    ensure_topics(s, say=lambda *a, **k: None)
    migrate(cql, unique, say=lambda *_: None)
    proc = SchedulerProc(s, tmp_path)
    bus = Bus(s)
    try:
        proc.wait_owning({0, 1})
        yield s, bus, proc
    except BaseException:
        print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-5000:]}")
        raise
    finally:
        bus.close()
        proc.stop()
        drop_topics(s)


@pytest_asyncio.fixture(loop_scope="function")
async def gw(plane, cql):
    s, bus, proc = plane
    key = create_tenant(cql, "alpha", rate_per_minute=600)
    with real_deps(s, session=cql) as deps:
        client = TestClient(TestServer(create_app(s, deps, GatewayConfig())))
        await client.start_server()
        try:
            yield client, key, deps, plane
        finally:
            await client.close()


def _topic_bytes(s) -> bytes:
    """Every key, value and header of every record of every topic of this run, concatenated."""
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(s.topic_prefix + ".")]
    assert any(t.endswith("commands") for t in topics) and any("changelog" in t for t in topics), topics
    cons = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": f"grep-{uuid.uuid4()}",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    out = bytearray()
    try:
        meta = admin.list_topics(timeout=10).topics
        parts = [TopicPartition(t, p, 0) for t in topics for p in meta[t].partitions]
        ends = {(tp.topic, tp.partition): cons.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        todo = {k for k, end in ends.items() if end > 0}
        cons.assign([tp for tp in parts if (tp.topic, tp.partition) in todo])
        deadline = time.monotonic() + 30
        while todo and time.monotonic() < deadline:
            for m in cons.consume(500, 1.0):
                if m.error() is not None:
                    todo.discard((m.topic(), m.partition()))
                    continue
                out += (m.key() or b"") + (m.value() or b"")
                for _, v in m.headers() or []:
                    out += v or b""
                if m.offset() + 1 >= ends[(m.topic(), m.partition())]:
                    todo.discard((m.topic(), m.partition()))
        assert not todo, f"topics not read to their end: {todo}"
    finally:
        cons.close()
    return bytes(out)


def _table_text(cql, keyspace: str) -> str:
    names = [r.table_name for r in cql.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))]
    return "\n".join(repr(list(cql.execute(f"SELECT * FROM {keyspace}.{t}"))) for t in names)


def _forms(secret: bytes) -> list[bytes]:
    return [secret, secret.hex().encode(), base64.b64encode(secret), base64.urlsafe_b64encode(secret).rstrip(b"=")]


def _project(s) -> None:
    with build(s, until_idle=True) as projector:
        projector.run()


async def test_erased_videos_leave_no_prompt_in_topics_tables_or_buckets_and_replay_still_works(
        gw, cql, caplog, tmp_path: Path):
    caplog.set_level(logging.DEBUG)
    client, key, deps, (s, bus, proc) = gw
    s3 = s3_client(s)
    # B first, leased by a (simulated) worker before A is submitted, so the grant is B's.
    r = await client.post("/v1/videos", json=_body(1), headers=auth(key, "b"))
    assert r.status == 202, await r.text()
    b = (await r.json())["job_id"]
    bus.wait_event(b, ev.JobQueued)
    grant = bus.request_work("w-erase")
    assert isinstance(grant, ev.WorkAssigned) and grant.job_id == b
    assert SECRETS["lighthouse"] not in grant.spec.prompt  # sealed on the assignments topic too
    r = await client.post("/v1/videos", json=_body(2), headers=auth(key, "a"))
    a = (await r.json())["job_id"]
    bus.wait_event(a, ev.JobQueued)
    # What the worker wrote: a video and a checkpoint of B; a checkpoint of A from an earlier attempt.
    s3.put_object(Bucket=s.s3_bucket_artifacts, Key=f"videos/{b}/e00000001/video.mp4", Body=b"mp4")
    for job in (a, b):
        s3.put_object(Bucket=s.s3_bucket_checkpoints, Key=f"ckpt/{job}/e00000001/s00000002.ckpt", Body=b"ck")
    data_keys = [deps.vault.data_key_sync(j) for j in (a, b)]
    kek_raw = base64.b64decode(Path(s.kek_file).read_text())

    _project(s)
    view = await (await client.get(f"/v1/videos/{a}", headers=auth(key))).json()
    assert view["prompt"] == _body(2)["prompt"] and view["params"]["callback_url"] == _body(2)["callback_url"]
    assert SECRETS["lighthouse"] not in _table_text(cql, s.cassandra_keyspace)  # sealed there before erasure too

    for job in (b, a):
        r = await client.delete(f"/v1/videos/{job}", headers=auth(key))
        assert r.status == 202, await r.text()
    erased_a = bus.wait_event(a, ev.JobErased)
    bus.wait_event(b, ev.JobErased)
    assert erased_a.by == "tenant:alpha"
    assert bus.wait_event(a, ev.JobCancelled).reason == "erased"
    assert bus.wait_event(b, ev.CancelRequested).reason == "erased"
    # The worker learns of the cancel and hands the lease back: B ends cancelled too.
    bus.send(cmd.ReleaseLease(bus.next_id(), b, grant.epoch, "w-erase", reason="cancelled"))
    bus.wait_event(b, ev.JobCancelled)
    _project(s)
    for job in (a, b):
        gone = await client.get(f"/v1/videos/{job}", headers=auth(key))
        assert gone.status == 410 and (await gone.json())["error"]["code"] == "erased"

    # Unrecoverable: no data key, so the SubmitJob on the commands topic does not open, with the KEK or not.
    [submit] = [c for c in commands_for(s, a) if isinstance(c, cmd.SubmitJob)]
    with pytest.raises(Erased):
        deps.vault.open_sync("prompt", submit.spec.prompt)
    assert deps.vault.keystore.get(a) is None and deps.vault.keystore.get(b) is None
    # Nothing kept holds the text: the topics' raw bytes, every table, the buckets.
    raw = _topic_bytes(s)
    tables = _table_text(cql, s.cassandra_keyspace)
    for secret in SECRETS.values():
        assert secret.encode() not in raw and secret not in tables
    for bucket, prefix in ((s.s3_bucket_artifacts, f"videos/{b}/"), (s.s3_bucket_checkpoints, f"ckpt/{a}/"),
                           (s.s3_bucket_checkpoints, f"ckpt/{b}/")):
        assert s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount", 0) == 0
    # No key material anywhere it could leak: topics, tables, the scheduler's log, the gateway's log, metrics.
    metrics = generate_latest(client.server.app[GATEWAY].metrics.registry)
    logs = (proc.log() + "\n".join(r.getMessage() for r in caplog.records)).encode()
    for material in [*data_keys, kek_raw]:
        for form in _forms(material):
            assert form not in raw and form not in logs and form not in metrics
            assert form.decode("latin-1") not in tables

    # Replay still works: the projector rebuilt from the whole topic gives the same rows, and the scheduler's
    # state folded from the events topic is the one its table holds.
    before = dump(cql, s.cassandra_keyspace)
    with build(s, rebuild=True, until_idle=True) as projector:
        projector.run()
    assert dump(cql, s.cassandra_keyspace) == before
    report = replay.rebuild(s)
    assert report.ok, report.summary()
    folded = replay.fold_events(s, bus.codec)
    assert folded[a].status == "cancelled" and folded[a].spec.prompt == "" and folded[a].callback_url is None
