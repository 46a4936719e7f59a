"""Schemathesis against a real gateway (real Kafka and Cassandra, its own topics and keyspace), driven by
the /openapi.json the gateway itself serves: no answer may be a 5xx, and every answer must be one the
document declares, with the declared content type and schema.

The gateway runs in a thread with its own event loop on a real 127.0.0.1 port (schemathesis makes
blocking HTTP calls, so it cannot share the test's loop). Its worker-API waits are shortened
(verdict_seconds, lease_poll_max_seconds): no scheduler runs here, so every fenced command would otherwise
wait out its full verdict time.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from dataclasses import replace

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings as hsettings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from spotreel.adapters.kafka import delete_topics, ensure_scheduler_topics
from spotreel.platform.migrate import migrate
from spotreel.platform.topics import ensure_topics
from spotreel.services.gateway.app import create_app
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_tenant, create_worker_key
from spotreel.services.gateway.wiring import real_deps

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
FAST = GatewayConfig(verdict_seconds=0.2, lease_poll_default_seconds=0.2, lease_poll_max_seconds=0.5,
                     default_burst=1000, stream_max_seconds=2.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayThread:
    def __init__(self, settings, cfg: GatewayConfig) -> None:
        self.settings, self.cfg = settings, cfg
        self.port = _free_port()
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(target=self._run, name="fuzzed-gateway", daemon=True)

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced by start()
            self.failed = exc
            self.ready.set()

    async def _serve(self) -> None:
        with real_deps(self.settings) as deps:
            runner = web.AppRunner(create_app(self.settings, deps, self.cfg))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self.ready.set()
            await self.stop.wait()
            await runner.cleanup()

    def start(self) -> str:
        self.thread.start()
        assert self.ready.wait(60), "the gateway did not start within 60 s"
        if self.failed is not None:
            raise self.failed
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


@pytest.fixture(scope="module")
def fuzzed(stack, settings, cassandra_cluster):
    unique = "f" + uuid.uuid4().hex[:12]
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2)
    ensure_topics(s, say=lambda *a, **k: None)
    ensure_scheduler_topics(s)  # the assignments topic the worker API's bus reads
    session = cassandra_cluster.connect()
    migrate(session, unique, say=lambda *_: None)
    session.set_keyspace(unique)
    keys = {"tenant": create_tenant(session, "fuzz", rate_per_minute=100_000, max_in_flight=100_000),
            "worker": create_worker_key(session, "fuzz-workers")}
    gw = GatewayThread(s, FAST)
    try:
        yield gw.start(), keys
    finally:
        gw.close()
        session.execute(f"DROP KEYSPACE IF EXISTS {unique}")
        session.shutdown()
        delete_topics(s)


# Lease long-polls, and the SSE stream, hold a request open by design; shortened above, still skipped here
# they would dominate the run. Everything else the document lists is fuzzed.
SLOW = ("/internal/workers/{id}/lease", "/v1/videos/{id}/stream")


def test_no_server_errors_and_answers_match_the_document(fuzzed):
    base, keys = fuzzed
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) > 20
    failures: list[str] = []
    for op in operations:
        if op.path in SLOW:
            continue
        key = keys["worker"] if op.path.startswith("/internal/") else keys["tenant"]

        @given(case=op.as_strategy())
        @hsettings(max_examples=20, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))
        def fuzz(case) -> None:
            case.call_and_validate(base_url=base, headers={"Authorization": f"Bearer {key}"}, checks=CHECKS,
                                   timeout=30)

        try:
            fuzz()
        except Exception as exc:  # noqa: BLE001 - collected, so one run reports every failing operation
            failures.append(f"{op.label}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_stateful_sequences_over_the_documents_links(fuzzed):
    """Schemathesis' state machine follows the OpenAPI `links` (openapi.LINKS): a video, DAG or schedule is
    created, then read, listed, cancelled, paused, retried, re-prioritised through the id the 202 named.
    No step may be a 5xx or answer outside the document."""
    base, keys = fuzzed
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    schema = schema.exclude(path_regex="^/internal/").exclude(path="/v1/videos/{id}/stream")
    headers = {"Authorization": f"Bearer {keys['tenant']}"}

    class Flow(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"base_url": base, "headers": headers, "timeout": 30}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, headers=headers)

    Flow.run(settings=hsettings(max_examples=12, stateful_step_count=4, deadline=None, derandomize=True,
                                database=None, suppress_health_check=list(HealthCheck)))
