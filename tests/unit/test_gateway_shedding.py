"""Load shedding by criticality (services/gateway/loopwatch.py): while the gateway runs behind (its event
loop, the age of the worker requests it reads, the scheduler's verdicts), idle lease polls and new
submissions are answered 503 `overloaded` with Retry-After before any work, and what a lease holder sends
never is. The worker's HTTP transport and runtime wait out the Retry-After."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from spotreel.api.config import GatewayConfig
from spotreel.domain import commands as cmd
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.context import GATEWAY
from spotreel.services.gateway.loopwatch import MAX_RETRY_S, MIN_RETRY_S, MIN_SAMPLES, LoopWatch, retry_after_s
from spotreel.config.settings import Settings
from spotreel.worker.transport import TransportError, WorkerProfile
from spotreel.worker.transport_http import HttpTransport
from tests.unit.gateway_fakes import WORKER_KEY, fake_deps
from tests.unit.test_gateway_leasedesk import FakeBus, Sink
from tests.unit.test_gateway_store_outage import AcceptingBus

JOB = "j" + "4" * 32
W = {"Authorization": f"Bearer {WORKER_KEY}"}
T = {"Authorization": "Bearer key-a"}
POLL = {"gpu_type": "any", "models": ["tiny-t2v"], "wait_seconds": 0}
SUBMIT = {"prompt": "a red fox in the snow"}


@given(st.integers(0, 200_000), st.floats(0.1, 60))
def test_shed_exactly_from_the_threshold_and_told_to_wait_within_bounds(lag_ms, threshold_s):
    retry = retry_after_s(lag_ms, threshold_s)
    if lag_ms < threshold_s * 1000:
        assert retry is None
    else:
        assert retry is not None and MIN_RETRY_S <= retry <= MAX_RETRY_S
        assert retry >= min(MAX_RETRY_S, lag_ms / 1000)  # come back once the loop has caught up


@given(st.integers(0, 200_000))
def test_a_zero_threshold_never_sheds(lag_ms):
    assert retry_after_s(lag_ms, 0) is None


async def test_the_watch_measures_a_loop_held_up():
    watch = LoopWatch(every_s=0.05, sustain=1)
    task = asyncio.get_running_loop().create_task(watch.run())
    try:
        await asyncio.sleep(0.2)
        assert watch.lag_ms < 400
        time.sleep(0.6)  # the loop held up, as by a burst of work
        await asyncio.sleep(0.01)
        assert watch.lag_ms >= 500
        await asyncio.sleep(0.2)  # caught up again
        assert watch.lag_ms < 400
    finally:
        task.cancel()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_medians_need_enough_recent_samples_and_the_largest_measure_counts():
    clock = _Clock()
    watch = LoopWatch(window_s=2.0, sustain=1, clock=clock)
    for _ in range(MIN_SAMPLES - 1):
        watch.note_age(9_000)
    assert watch.measure() == 0  # too few to tell a gateway behind from one worker's clock
    watch.note_age(9_000)
    assert watch.measure() == 9_000
    for _ in range(MIN_SAMPLES + 1):
        watch.note_age(100)  # the median: one worker far off, or a few slow ones, shed nothing
    assert watch.measure() == 100
    clock.now += 2.5  # nothing read since: the old ages are forgotten
    assert watch.measure() == 0
    for ms in (4_000, 5_000, 5_000, 6_000, 5_000, 5_000, 5_000, 5_000):
        watch.note_verdict_wait(ms)  # the scheduler behind the gateway
    watch.lag_ms = 700
    assert watch.measure() == 5_000 and watch.shed(2.0) == 5 and watch.shed(6.0) is None


@given(st.lists(st.integers(0, 60_000), min_size=MIN_SAMPLES, max_size=64), st.integers(0, 60_000))
def test_behind_is_at_least_the_loops_lag_and_at_most_the_largest_sample(ages, lag):
    watch = LoopWatch(sustain=1, clock=lambda: 5.0)
    for a in ages:
        watch.note_age(a)
    watch.lag_ms = lag
    assert lag <= watch.measure() <= max(lag, max(ages))


@pytest_asyncio.fixture(loop_scope="function")
async def gateway():
    deps = fake_deps(work=AcceptingBus())
    app = create_app(Settings(), deps, GatewayConfig(lease_ttl_ms=30_000))
    c = TestClient(TestServer(app))
    await c.start_server()
    behind = LoopWatch()  # not running: what each test sets stays as set
    app[GATEWAY].watch = behind
    try:
        yield c, deps, behind, app[GATEWAY]
    finally:
        await c.close()


def _shed(gw, kind: str) -> float:
    return gw.metrics.registry.get_sample_value("spotreel_gateway_admission_rejections_total", {"reason": kind}) or 0


async def test_an_idle_poll_is_shed_before_any_work_while_the_loop_is_behind(gateway):
    c, deps, behind, gw = gateway
    behind.behind_ms = 2_400  # the default threshold for idle polls is 2 s
    r = await c.post("/internal/workers/w-1/lease", json=POLL, headers=W)
    body = await r.json()
    assert r.status == 503 and body["error"]["code"] == "overloaded", body
    assert r.headers["Retry-After"] == "3"
    assert not [x for x in deps.commands.sent if isinstance(x, cmd.RequestWork)]  # nothing asked of a partition
    assert _shed(gw, "shed_idle_poll") == 1


async def test_worker_requests_that_waited_to_be_read_make_the_gateway_shed_idle_polls(gateway):
    c, deps, behind, gw = gateway
    sent = deps.clock_ms() - 3_500  # each waited 3.5 s in the gateway's sockets before a handler took it
    for _ in range(MIN_SAMPLES):
        r = await c.post(f"/internal/leases/{JOB}/heartbeat", json={"epoch": 4, "worker_id": "w-1"},
                         headers={**W, "X-Spotreel-Sent-At": str(sent)})
        assert r.status == 200  # never shed themselves
    assert behind.measure() == 3_500
    r = await c.post("/internal/workers/w-2/lease", json=POLL, headers=W)
    assert r.status == 503 and r.headers["Retry-After"] == "4"
    r = await c.post("/v1/videos", json=SUBMIT, headers=T)
    assert r.status == 202  # submissions shed from 5 s on


def test_only_a_sustained_lag_sheds():
    watch = LoopWatch(sustain=4, clock=lambda: 1.0)
    for lag in (0, 0, 0, 15_000, 3_000, 2_500):  # a freeze, then its backlog worked off
        watch.lag_ms = lag
        watch.measure()
    assert watch.shed(2.0) is None
    watch.lag_ms = 2_200
    assert watch.measure() == 2_200 and watch.shed(2.0) == 3  # behind four measurements in a row


async def test_a_lease_holders_renewal_is_never_shed(gateway):
    c, deps, behind, gw = gateway
    behind.behind_ms = 60_000
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", json={"epoch": 4, "worker_id": "w-1"}, headers=W)
    assert r.status == 200, await r.text()
    r = await c.post(f"/internal/leases/{JOB}/progress",
                     json={"epoch": 4, "worker_id": "w-1", "step": 3, "progress_pct": 15.0}, headers=W)
    assert r.status == 200, await r.text()
    assert [type(x) for x in deps.commands.sent] == [cmd.RenewLease, cmd.ReportProgress]


async def test_submissions_are_shed_later_than_idle_polls(gateway):
    c, deps, behind, gw = gateway
    behind.behind_ms = 3_000  # above the idle polls' 2 s, below the submissions' 5 s: served
    r = await c.post("/v1/videos", json=SUBMIT, headers=T)
    assert r.status == 202, await r.text()
    behind.behind_ms = 5_500
    for path, body in (("/v1/videos", SUBMIT), ("/v1/dags", {"nodes": [{"key": "a", **SUBMIT}]})):
        r = await c.post(path, json=body, headers={**T, "Idempotency-Key": "shed-1"})
        answer = await r.json()
        assert r.status == 503 and answer["error"]["code"] == "overloaded", answer
        assert r.headers["Retry-After"] == "6"
    assert _shed(gw, "shed_submission") == 2
    assert sum(isinstance(x, cmd.SubmitJob) for x in deps.commands.sent) == 1


async def test_zero_thresholds_never_shed():
    sink = Sink()
    deps = fake_deps(commands=sink, work=FakeBus())
    app = create_app(Settings(), deps, GatewayConfig(shed_idle_polls_lag_seconds=0, shed_submissions_lag_seconds=0,
                                                     idle_pass_seconds=0.05))
    async with TestClient(TestServer(app)) as client:
        app[GATEWAY].watch = behind = LoopWatch()
        behind.behind_ms = 120_000
        r = await client.post("/v1/videos", json=SUBMIT, headers=T)
        assert r.status == 202, await r.text()
        r = await client.post("/internal/workers/w-1/lease", json=POLL, headers=W)
        assert r.status == 204, await r.text()
        assert sink.of(cmd.SubmitJob) and sink.of(cmd.RequestWork)  # both did their work


class _Overloaded(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"error": {"code": "overloaded", "message": "behind"}}'
        self.send_response(503)
        self.send_header("Retry-After", "7")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def overloaded_gateway():
    server = HTTPServer(("127.0.0.1", 0), _Overloaded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_workers_http_transport_keeps_the_retry_after_of_a_shed_poll(overloaded_gateway):
    transport = HttpTransport(overloaded_gateway, "wk", WorkerProfile("w-1", "any", ("tiny-t2v",)))
    with pytest.raises(TransportError) as raised:
        transport.lease(0.0)
    assert raised.value.retry_after_s == 7
    assert TransportError("down").retry_after_s is None


class _Notice:
    requested = False

    def __init__(self) -> None:
        self.waits: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return False


def test_the_worker_runtime_waits_out_a_retry_after_and_backs_off_as_before_without_one():
    from spotreel.worker.runtime import RuntimeOptions, WorkerRuntime

    notice = _Notice()
    rt = WorkerRuntime(None, None, None, None, None, notice, RuntimeOptions(), report=lambda *a, **k: None)
    answers = iter([TransportError("503 overloaded", retry_after_s=4), TransportError("connection refused"), "lease"])

    def call():
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    assert rt._with_retry(call, "lease") == "lease"
    told, untold = notice.waits
    assert 4 <= told < 5  # the Retry-After, and up to a second more so a fleet told alike spreads out
    assert untold == 1.0  # no Retry-After: the exponential backoff (0.5 s, then 1 s)
