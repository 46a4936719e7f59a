"""Tracing across the hops (spotreel/runtime/tracing.py) on the real Kafka and a real scheduler process: a submit with
a sampled `traceparent` through the real gateway app is answered with its trace id; the SubmitJob on the
commands topic, the scheduler's events, the worker's lease answer and the events of the worker's completion
carry the same trace; the scheduler logs its spans of it; `spotreel replay` names it."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.runtime import tracing
from spotreel.codec import Codec
from spotreel.platform.migrate import migrate
from spotreel.platform.topics import commands_topic, events_topic
from spotreel.services.gateway.app import create_app
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.scheduler import replay
from spotreel.tenancy import create_tenant, create_worker_key
from tests.integration.schedkit import SchedulerProc, drop_topics, make_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TRACE = uuid.uuid4().hex
CALLER = f"00-{TRACE}-{uuid.uuid4().hex[:16]}-01"


@pytest.fixture
def tr_settings(settings, unique, cql, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=1)
    make_topics(s)
    migrate(cql, unique, say=lambda *_: None)
    proc = SchedulerProc(s, tmp_path)
    try:
        proc.wait_owning({0})
        yield s, proc
    finally:
        proc.stop()
        drop_topics(s)


@pytest_asyncio.fixture(loop_scope="function")
async def gw(tr_settings, cql):
    s, proc = tr_settings
    tracing.setup("gateway", env={})
    keys = {"tenant": create_tenant(cql, "alpha"), "worker": create_worker_key(cql, "fleet-a")}
    with real_deps(s, session=cql) as deps:
        client = TestClient(TestServer(create_app(s, deps, GatewayConfig(verdict_seconds=10.0, renewal_answer_seconds=10.0))))
        await client.start_server()
        try:
            yield client, keys, s, proc
        finally:
            await client.close()


def _records(settings, topic: str, job_id: str) -> list[tuple[str, str | None]]:
    """(record type, trace id of its traceparent) of the job's records on `topic`, in order."""
    codec = Codec.default()
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"tr-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    _, high = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    out = []
    try:
        while high > 0 and (m := cons.poll(5.0)) is not None:
            if m.error() is None and m.offset() >= high - 1:
                high = 0  # read up to the end as it was when asked
            if m.error() is None and m.key() == job_id.encode():
                out.append((type(codec.decode_message(m.value())).__name__,
                            tracing.trace_id_of(tracing.traceparent_of(m.headers()))))
    finally:
        cons.close()
    return out


async def test_one_jobs_trace_through_gateway_scheduler_and_worker_api(gw):
    client, keys, settings, proc = gw
    tenant = {"Authorization": f"Bearer {keys['tenant']}"}
    worker = {"Authorization": f"Bearer {keys['worker']}"}
    model = f"m-{uuid.uuid4().hex[:8]}"

    r = await client.post("/v1/videos", json={"prompt": "a red fox", "model": model, "gpu_type": "cpu"},
                          headers={**tenant, "Idempotency-Key": "k1", "traceparent": CALLER})
    assert r.status == 202, await r.text()
    assert r.headers["X-Trace-Id"] == TRACE and tracing.trace_id_of(r.headers["traceparent"]) == TRACE
    job_id = (await r.json())["job_id"]

    # An untraced submit next to it: nothing of it carries a trace.
    plain = await client.post("/v1/videos", json={"prompt": "a blue fox", "model": f"{model}-x", "gpu_type": "cpu"},
                              headers={**tenant, "Idempotency-Key": "k2"})
    assert plain.status == 202 and "X-Trace-Id" not in plain.headers
    plain_id = (await plain.json())["job_id"]

    lease = await client.post("/internal/workers/w-a/lease",
                              json={"gpu_type": "cpu", "models": [model], "wait_seconds": 20}, headers=worker)
    assert lease.status == 200, await lease.text()
    a = await lease.json()
    assert a["job_id"] == job_id and tracing.trace_id_of(a["traceparent"]) == TRACE

    # The worker's completion inside its span of the trace (what worker/transport_http.py sends).
    child = f"00-{TRACE}-{uuid.uuid4().hex[:16]}-01"
    done = await client.post(f"/internal/leases/{job_id}/complete",
                             json={"epoch": a["epoch"], "worker_id": "w-a", "artifact_checksum": "a" * 64,
                                   "artifact_key": f"videos/{job_id}/e{a['epoch']}.mp4", "artifact_size_bytes": 9},
                             headers={**worker, "traceparent": child})
    assert done.status == 200 and (await done.json())["event"] == "JobSucceeded", await done.text()

    commands = _records(settings, commands_topic(settings), job_id)
    assert ("SubmitJob", TRACE) in commands and ("CompleteJob", TRACE) in commands, commands
    events = _records(settings, events_topic(settings), job_id)
    names = [name for name, _ in events]
    assert names[0] == "JobSubmitted" and {"JobQueued", "JobLeased", "JobSucceeded"} <= set(names), events
    assert all(trace == TRACE for _, trace in events), events
    assert all(trace is None for _, trace in _records(settings, events_topic(settings), plain_id))
    assert all(trace is None for _, trace in _records(settings, commands_topic(settings), plain_id))

    # The scheduler's own spans of this trace, in its log (the default exporter).
    spans = [json.loads(line[line.index("{"):]) for line in proc.log().splitlines() if '"trace_id"' in line]
    names = {s["name"] for s in spans if s["trace_id"] == TRACE}
    assert {"scheduler SubmitJob", "scheduler RequestWork", "scheduler CompleteJob"} <= names, names

    assert any(line == f"-- trace ids: {TRACE}" for line in replay.timeline(settings, job_id))
