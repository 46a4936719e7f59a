"""The webhook notifier against real Kafka and Cassandra, delivering to real local HTTP receivers.

Events are produced to a per-test events topic as the scheduler writes them (histories driven through the
domain's decide); the notifier runs in this process on that topic and a per-test keyspace.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from confluent_kafka import Producer

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.topics import events_topic
from spotreel.platform.seed import api_key_hash
from spotreel.services.gateway.cassandra_store import CassandraAuth, CassandraReads
from spotreel.tenancy import create_tenant, create_webhook_secret
from spotreel.webhooks import signing
from spotreel.services.webhooks.backoff import RetryPolicy
from spotreel.services.webhooks.payload import event_id
from spotreel.services.webhooks.service import build
from spotreel.services.webhooks.store import WebhookStore
from tests.integration.gatewaykit import own_topics_and_keyspace
from tests.unit.projection_histories import history

FAST = RetryPolicy(max_attempts=5, base_s=0.05, cap_s=0.3, timeout_s=5)


@pytest.fixture
def wh_settings(settings, unique, cql):
    with own_topics_and_keyspace(settings, unique, cql, webhook_allow_private=1) as s:
        yield s


@pytest.fixture
def secret(cql):
    create_tenant(cql, "hooks")
    made = create_webhook_secret(cql, "hooks")
    assert made is not None and create_webhook_secret(cql, "hooks") is None  # shown once, kept
    return made


class Receiver:
    """A webhook endpoint that checks signature and timestamp, and answers from a script of statuses."""

    def __init__(self, secret: str, script: list[int] | None = None) -> None:
        self.secret = secret
        self.script = list(script or [])
        self.calls: list[dict] = []
        self.bad: list[str] = []
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            signing.verify(self.secret, request.headers, body, int(time.time()))
        except signing.BadSignature as exc:
            self.bad.append(str(exc))
            return web.Response(status=400)
        self.calls.append({"id": request.headers[signing.EVENT_ID_HEADER], "body": json.loads(body),
                           "type": request.headers[signing.EVENT_TYPE_HEADER]})
        return web.Response(status=self.script.pop(0) if self.script else 204)

    @property
    def url(self) -> str:
        return str(self.server.make_url("/hook"))

    def ids(self) -> list[str]:
        return [c["id"] for c in self.calls]


async def serve_hook(handler) -> tuple[TestServer, str]:
    """`handler` served at /hook on a loopback port: the server (to close) and the URL to give as callback."""
    app = web.Application()
    app.router.add_post("/hook", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, str(server.make_url("/hook"))


def produce(settings, events) -> None:
    codec, p = Codec.default(), Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True})
    for e in events:
        p.produce(events_topic(settings), key=e.job_id.encode(), value=codec.encode_message(e),
                  partition=partition_for(e.job_id, settings.partitions))
    assert p.flush(30) == 0


async def wait_until(pred, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def run_notifier(settings, cql, policy=FAST):
    stop = asyncio.Event()
    ctx = build(settings, policy, session=cql)
    notifier = ctx.__enter__()
    task = asyncio.create_task(notifier.run(stop, drain_s=2))

    async def halt():
        stop.set()
        await asyncio.wait_for(task, 60)
        ctx.__exit__(None, None, None)
    return notifier, halt


async def test_signed_webhooks_on_terminal_states_with_retries(wh_settings, cql, secret):
    good, flaky = Receiver(secret), Receiver(secret, script=[500, 503])
    await good.server.start_server()
    await flaky.server.start_server()
    ok = history("ok", [("grant", 0, 0), ("progress", 50, 10), ("complete", 0, 0)], tenant="hooks",
                 callback_url=good.url)
    cancelled = history("gone", [("cancel", 0, 0)], tenant="hooks", callback_url=flaky.url)
    silent = history("quiet", [("grant", 0, 0), ("complete", 0, 0)], tenant="hooks")
    produce(wh_settings, ok + cancelled + silent)
    notifier, halt = await run_notifier(wh_settings, cql)
    try:
        await wait_until(lambda: good.calls and len(flaky.calls) >= 3, what="both webhooks delivered")
        store = WebhookStore(cql)
        await wait_until(lambda: (store.outcome(event_id(cancelled[-1].job_id, cancelled[-1].version)) or
                                  False) and store.outcome(event_id(cancelled[-1].job_id,
                                                                    cancelled[-1].version)).status == "delivered",
                         what="the outcome row")
    finally:
        await halt()
        await good.server.close()
        await flaky.server.close()

    assert good.bad == [] and flaky.bad == []
    done = ok[-1]
    [call] = good.calls
    assert call["id"] == event_id(done.job_id, done.version) == call["body"]["id"]
    assert call["type"] == "video.succeeded"
    data = call["body"]["data"]
    assert data["status"] == "succeeded" and data["job_id"] == done.job_id
    assert data["content_url"] == f"{wh_settings.gateway_url}/v1/videos/{done.job_id}/content"
    assert data["sha256"] == done.artifact_checksum

    # Failed twice, then accepted: three signed requests carrying the same event id and the same body.
    end = cancelled[-1]
    assert flaky.ids() == [event_id(end.job_id, end.version)] * 3
    assert all(c["body"] == flaky.calls[0]["body"] for c in flaky.calls)
    assert flaky.calls[0]["body"]["data"]["status"] == "cancelled"
    outcome = WebhookStore(cql).outcome(event_id(end.job_id, end.version))
    assert (outcome.status, outcome.attempts, outcome.last_status) == ("delivered", 3, 204)
    assert notifier.metrics.attempts.labels("retry")._value.get() == 2

    # The per-job row the gateway shows as `webhook` in GET /v1/videos/{id}, read through the gateway's own
    # store: the final outcome, not the retrying rows written before it; no callback, no row.
    reads = CassandraReads(cql)
    state = await reads.webhook_state(end.job_id)
    assert (state.state, state.attempts, state.last_status, state.event_id) == (
        "delivered", 3, 204, event_id(end.job_id, end.version))
    assert (await reads.webhook_state(done.job_id)).state == "delivered"
    assert await reads.webhook_state(silent[-1].job_id) is None


async def test_private_address_is_refused_unless_allowed(wh_settings, cql, secret):
    strict = replace(wh_settings, webhook_allow_private=0)
    rx = Receiver(secret)
    await rx.server.start_server()
    port = rx.server.port
    urls = [f"http://127.0.0.1:{port}/hook", f"http://localhost:{port}/hook", f"http://[::1]:{port}/hook",
            f"http://169.254.169.254:{port}/hook"]
    jobs = [history(f"priv-{i}", [("grant", 0, 0), ("complete", 0, 0)], tenant="hooks", callback_url=u)
            for i, u in enumerate(urls)]
    produce(strict, [e for h in jobs for e in h])
    store = WebhookStore(cql)
    ends = [event_id(h[-1].job_id, h[-1].version) for h in jobs]
    notifier, halt = await run_notifier(strict, cql)
    try:
        await wait_until(lambda: all(store.outcome(e) for e in ends), what="an outcome for every job")
    finally:
        await halt()
        await rx.server.close()
    assert rx.calls == [] and rx.bad == []
    outcomes = [store.outcome(e) for e in ends]
    assert [o.status for o in outcomes] == ["refused"] * 4
    assert "loopback" in outcomes[0].last_error and "loopback" in outcomes[1].last_error
    assert "link-local" in outcomes[3].last_error
    refused = store.job_state(jobs[3][-1].job_id)
    assert refused.state == "refused" and "link-local" in refused.last_error


async def test_undelivered_webhook_survives_a_restart_and_delivered_ones_are_not_resent(wh_settings, cql, secret):
    first = Receiver(secret)
    down = Receiver(secret, script=[503] * 1000)
    await first.server.start_server()
    await down.server.start_server()
    a = history("early", [("grant", 0, 0), ("complete", 0, 0)], tenant="hooks", callback_url=first.url)
    b = history("later", [("grant", 0, 0), ("fail_final", 0, 0)], tenant="hooks", callback_url=down.url)
    produce(wh_settings, a + b)
    patient = RetryPolicy(max_attempts=50, base_s=0.05, cap_s=0.2, timeout_s=5)
    _, halt = await run_notifier(wh_settings, cql, patient)
    try:
        await wait_until(lambda: first.calls and len(down.calls) >= 2, what="a delivery and failing attempts")
    finally:
        await halt()
    store = WebhookStore(cql)
    b_id = event_id(b[-1].job_id, b[-1].version)
    assert store.outcome(b_id).status == "retrying"
    assert store.job_state(b[-1].job_id).state == "retrying" and store.job_state(b[-1].job_id).attempts >= 2

    # The receiver is back; a new notifier (same group) picks up where the committed offsets say.
    down.script.clear()
    before = len(down.calls)
    _, halt = await run_notifier(wh_settings, cql, patient)
    try:
        await wait_until(lambda: (store.outcome(b_id) or False) and store.outcome(b_id).status == "delivered",
                         what="the webhook delivered after the restart")
    finally:
        await halt()
        await first.server.close()
        await down.server.close()
    assert down.ids()[before:] == [b_id] and down.calls[-1]["body"]["data"]["status"] == "failed"
    # The restarted notifier counted attempts from 1 again; its final outcome still replaced the old row.
    assert store.job_state(b[-1].job_id).state == "delivered"
    assert first.ids() == [event_id(a[-1].job_id, a[-1].version)]  # not sent again


async def test_event_filters_choose_what_a_job_hears(wh_settings, cql, secret):
    """A job that asked for started and progress hears its lease and each milestone once (a resumed run
    re-crossing 25 % sends nothing new) and not its success; a job with the default hears only the end.
    The filter is written as the gateway writes it, before the submission is on the topic."""
    rx = Receiver(secret)
    await rx.server.start_server()
    chosen = history("chosen", [("grant", 0, 0), ("progress", 30, 6), ("progress", 60, 12), ("progress", 40, 8),
                                ("progress", 80, 16), ("complete", 0, 0)], tenant="hooks", callback_url=rx.url)
    default = history("default", [("grant", 0, 0), ("progress", 60, 12), ("complete", 0, 0)], tenant="hooks",
                      callback_url=rx.url)
    await CassandraReads(cql).write_webhook_events(chosen[0].job_id, ["progress", "started"])
    produce(wh_settings, chosen + default)
    store = WebhookStore(cql)
    done = event_id(default[-1].job_id, default[-1].version)
    last = f"{chosen[0].job_id}.progress-75"
    _, halt = await run_notifier(wh_settings, cql)
    try:
        await wait_until(lambda: all((store.outcome(e) or False) and store.outcome(e).status == "delivered"
                                     for e in (done, last)), what="both jobs' last notifications")
    finally:
        await halt()
        await rx.server.close()
    assert rx.bad == []
    got = {(c["body"]["data"]["job_id"], c["type"], c["id"]) for c in rx.calls}
    leased = next(e for e in chosen if isinstance(e, ev.JobLeased))
    c = chosen[0].job_id
    assert got == {(c, "video.started", event_id(c, leased.version)), (c, "video.progress", f"{c}.progress-25"),
                   (c, "video.progress", f"{c}.progress-50"), (c, "video.progress", last),
                   (default[0].job_id, "video.succeeded", done)}
    assert len(rx.calls) == len(got)
    assert store.subscription(c).events == frozenset({"progress", "started"})
    assert store.subscription(default[0].job_id).events is None

    # The gateway tells a submitter whose tenant has no signing secret (202 with a warning): its auth row.
    auth = CassandraAuth(cql)
    with_secret = await auth.tenant_for_key_hash(api_key_hash(create_tenant(cql, "hooks")))
    without = await auth.tenant_for_key_hash(api_key_hash(create_tenant(cql, "nosecret")))
    assert (with_secret.webhook_secret_set, without.webhook_secret_set) == (True, False)


async def test_openai_style_webhooks_verify_with_the_sdk_and_standardwebhooks_across_a_rotation(wh_settings, cql,
                                                                                               secret):
    """A job made through the OpenAI-compatible surface (its subscription's payload style written by the
    gateway's own store, as it does before the SubmitJob) gets OpenAI's event payload; after a rotation each
    webhook carries a signature by the new secret and one by the old, and each verifies with the `openai` SDK
    (`webhooks.unwrap`) and the `standardwebhooks` library."""
    import openai
    import standardwebhooks

    from spotreel.tenancy import create_webhook_secret

    old, new = secret, create_webhook_secret(cql, "hooks", rotate=True)
    got: list[tuple[bytes, dict[str, str]]] = []

    async def handle(request: web.Request) -> web.Response:
        got.append((await request.read(), dict(request.headers)))
        return web.Response(status=204)

    server, url = await serve_hook(handle)
    done = history("oa-ok", [("grant", 0, 0), ("progress", 50, 10), ("complete", 0, 0)], tenant="hooks",
                   callback_url=url)
    failed = history("oa-bad", [("grant", 0, 0), ("fail_final", 0, 0)], tenant="hooks", callback_url=url)
    reads = CassandraReads(cql)
    for h in (done, failed):
        await reads.write_webhook_style(h[0].job_id, "openai")
    produce(wh_settings, done + failed)
    notifier, halt = await run_notifier(wh_settings, cql)
    try:
        await wait_until(lambda: len(got) >= 2, what="both webhooks")
    finally:
        await halt()
        await server.close()

    sdk = openai.OpenAI(api_key="unused", webhook_secret=old)
    events = {}
    for body, headers in got:
        assert len(headers["webhook-signature"].split()) == 2  # one by each secret, newest first
        for key in (old, new):
            standardwebhooks.Webhook(key).verify(body, headers)
            sdk.webhooks.verify_signature(body, headers, secret=key)
        # unwrap verifies and parses; openai 3.51.0 declares no video event class, so it reads the fields loosely.
        event = sdk.webhooks.unwrap(body, headers)
        events[event.data.id] = event
        # spotreel's own scheme still verifies too, by either secret.
        signing.verify(new, headers, body, int(time.time()))
        signing.verify(old, headers, body, int(time.time()))
    assert events[done[0].job_id].type == "video.completed"
    assert events[failed[0].job_id].type == "video.failed"
    assert all(e.object == "event" and isinstance(e.created_at, int) for e in events.values())
    with pytest.raises(openai.InvalidWebhookSignatureError):
        sdk.webhooks.verify_signature(got[0][0] + b" ", got[0][1], secret=new)
