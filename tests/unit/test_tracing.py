"""Tracing (spotreel/runtime/tracing.py): the traceparent helpers, the scheduler's hop (services/scheduler/traces.py)
and the gateway's server span: a sampled traceparent is continued and handed on, an unsampled or missing one
adds nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st

from spotreel.runtime import tracing
from spotreel.services.scheduler.traces import JobTraces
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, serving

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-01"
UNSAMPLED = f"00-{TRACE}-00f067aa0ba902b7-00"

tracing.setup("unit-test", env={})  # the SDK, sampling new traces at 0: only sampled parents are followed


def test_traceparent_of_record_headers():
    assert tracing.traceparent_of([("cmd-offset", b"7"), ("traceparent", SAMPLED.encode())]) == SAMPLED
    assert tracing.traceparent_of({"traceparent": SAMPLED}) == SAMPLED
    assert tracing.traceparent_of([("cmd-offset", b"7")]) is None
    assert tracing.traceparent_of(None) is None
    assert tracing.traceparent_of([]) is None
    assert tracing.traceparent_of([("traceparent", b"garbage")]) is None


@pytest.mark.parametrize("bad", [
    "", "00-xyz", f"ff-{TRACE}-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01",
    f"00-{TRACE}-{'0' * 16}-01", f"00-{TRACE}-00f067aa0ba902b-01", f"00-{TRACE}-00f067aa0ba902b7-01-extra"])
def test_parse_refuses_invalid_traceparents(bad):
    assert tracing.parse(bad) is None


def test_parse_and_sampled_flag():
    assert tracing.parse(SAMPLED) == (TRACE, "00f067aa0ba902b7", True)
    assert tracing.parse(UNSAMPLED) == (TRACE, "00f067aa0ba902b7", False)
    assert tracing.trace_id_of(SAMPLED) == TRACE


def test_with_traceparent_leaves_the_given_headers_alone():
    headers = [("cmd-offset", b"3")]
    out = tracing.with_traceparent(headers, SAMPLED)
    assert out == [("cmd-offset", b"3"), ("traceparent", SAMPLED.encode())]
    assert headers == [("cmd-offset", b"3")]
    assert tracing.with_traceparent(headers, None) is headers


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans())
def test_a_continued_span_keeps_the_trace_and_the_sampled_flag(trace_id, span_id, sampled):
    given_tp = f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"
    span = tracing.start_span("hop", given_tp)
    span.end()
    handed_on = tracing.traceparent_for(span)
    if not sampled:
        assert handed_on is None  # an unsampled context never travels
        return
    assert tracing.trace_id_of(handed_on) == f"{trace_id:032x}"
    assert tracing.parse(handed_on)[1] != f"{span_id:016x}"  # a new span, child of the given one


def test_sample_ratio_from_env():
    assert tracing.sample_ratio({}) == 0.0
    assert tracing.sample_ratio({"SPOTREEL_TRACE_SAMPLE": "0.25"}) == 0.25
    for bad in ("2", "-0.1", "often"):
        with pytest.raises(ValueError):
            tracing.sample_ratio({"SPOTREEL_TRACE_SAMPLE": bad})


# -- the scheduler's hop -----------------------------------------------------------------------------------

@dataclass
class _State:
    is_terminal: bool = False


@dataclass
class _Out:
    command: Any = None
    states: dict = field(default_factory=dict)
    events: list = field(default_factory=lambda: ["an event"])
    answer: Any = None


@dataclass
class _Assigned:
    job_id: str


class SubmitJob:
    pass


class RequestWork:
    pass


def test_scheduler_hop_continues_a_traced_command_and_remembers_its_job():
    traces = JobTraces()
    tp = traces.on_command([("traceparent", SAMPLED.encode())], _Out(SubmitJob(), {"j1": (None, _State())}),
                           3, 42, None)
    assert tracing.trace_id_of(tp) == TRACE
    assert "j1" in traces.by_job
    # The worker's RequestWork carries no trace; the job it is granted does.
    granted = traces.on_command(None, _Out(RequestWork(), {"j1": (_State(), _State())}, answer=_Assigned("j1")),
                                3, 43, None)
    assert tracing.trace_id_of(granted) == TRACE
    # Another job's command is not traced, and the job leaves the map when it ends.
    assert traces.on_command(None, _Out(SubmitJob(), {"j2": (None, _State())}), 3, 44, None) is None
    assert traces.on_command(None, _Out(SubmitJob(), {"j1": (_State(), _State(True))}), 3, 45, None) is not None
    assert traces.by_job == {}


def test_scheduler_hop_skips_absorbed_renewals():
    traces = JobTraces()
    traces.on_command([("traceparent", SAMPLED.encode())], _Out(SubmitJob(), {"j": (None, _State())}), 0, 1, None)
    assert traces.on_command(None, _Out(SubmitJob(), {}, events=[]), 0, 2, None) is None
    assert "j" in traces.by_job


def test_scheduler_hop_ignores_unsampled_and_missing_headers_and_is_bounded():
    traces = JobTraces(limit=2)
    assert traces.on_command([("traceparent", UNSAMPLED.encode())], _Out(SubmitJob(), {"j": (None, _State())}),
                             0, 1, None) is None
    assert traces.on_command([("cmd-offset", b"1")], _Out(SubmitJob(), {"j": (None, _State())}), 0, 1, None) is None
    assert traces.by_job == {}
    for job in ("a", "b", "c"):
        traces.on_command([("traceparent", SAMPLED.encode())], _Out(SubmitJob(), {job: (None, _State())}), 0, 1, None)
    assert list(traces.by_job) == ["b", "c"]


# -- the gateway's server span ----------------------------------------------------------------------------

@dataclass
class _TracedSink:
    """Records the traceparent current when each command is sent: what AsyncCommandSender puts in headers."""
    sent: list = field(default_factory=list)
    contexts: list = field(default_factory=list)

    async def send(self, command: Any) -> None:
        self.sent.append(command)
        self.contexts.append(tracing.kafka_headers())


@pytest_asyncio.fixture(loop_scope="function")
async def gateway():
    deps = fake_deps()
    deps.commands = _TracedSink()
    async with serving(deps) as client:
        yield client, deps.commands


async def _submit(client, key: str, extra: dict):
    return await client.post("/v1/videos", json={"prompt": "a fox", "duration": 2, "fps": 8},
                             headers={"Authorization": "Bearer key-a", "Idempotency-Key": key, **extra})


async def test_gateway_continues_a_sampled_traceparent_and_names_the_trace(gateway):
    client, sink = gateway
    r = await _submit(client, "t1", {"traceparent": SAMPLED})
    assert r.status == 202
    assert r.headers["X-Trace-Id"] == TRACE
    assert tracing.trace_id_of(r.headers["traceparent"]) == TRACE
    (headers,) = sink.contexts
    assert tracing.trace_id_of(tracing.traceparent_of(headers)) == TRACE


async def test_gateway_adds_nothing_without_a_sampled_traceparent(gateway):
    client, sink = gateway
    for key, extra in (("t2", {}), ("t3", {"traceparent": UNSAMPLED}), ("t4", {"traceparent": "nonsense"})):
        r = await _submit(client, key, extra)
        assert r.status == 202
        assert "X-Trace-Id" not in r.headers and "traceparent" not in r.headers
    assert sink.contexts == [None, None, None]


# -- the lease answer ----------------------------------------------------------------------------------------

class _Record:
    def __init__(self, topic: str, value: bytes, headers: list | None) -> None:
        self._t, self._v, self._h = topic, value, headers

    def topic(self) -> str:
        return self._t

    def key(self) -> bytes:
        return b"w1"

    def value(self) -> bytes:
        return self._v

    def headers(self) -> list | None:
        return self._h


def test_the_dispatch_listener_keeps_the_trace_a_grant_carried():
    from spotreel.codec import Codec
    from spotreel.dispatch.listener import DispatchListener
    from spotreel.domain import events as ev
    from spotreel.domain.spec import RenderSpec

    codec = Codec.default()
    lis = DispatchListener(Settings(), codec, name="unit")

    def grant(job: str) -> bytes:
        return codec.encode_message(ev.WorkAssigned("rw", "w1", job, 2, 1, 1000, 30_000, 31_000, "m@cpu", "cpu",
                                                    RenderSpec("m", "a fox", 2.0, "64x64", 8, 7, 20)))

    lis._route(_Record(lis.assignments, grant("j1"), [("traceparent", SAMPLED.encode())]))
    lis._route(_Record(lis.assignments, grant("j2"), None))
    assert lis.lease_trace("j1", 2) == SAMPLED
    assert lis.lease_trace("j1", 3) is None and lis.lease_trace("j2", 2) is None


def test_a_lease_answer_with_a_traceparent_gives_the_worker_its_trace():
    from spotreel.worker.transport import WorkerLease

    answer = {"job_id": "j", "epoch": 1, "worker_id": "w", "attempt": 1, "lease_ttl_ms": 1, "lease_expires_at_ms": 2,
              "pool": "m@cpu", "model": "m", "gpu_type": "cpu", "prompt": "p", "duration_s": 1.0,
              "resolution": "64x64", "fps": 8, "seed": 1, "num_steps": 2}
    assert WorkerLease.from_answer(answer).traceparent is None
    assert WorkerLease.from_answer({**answer, "traceparent": SAMPLED}).traceparent == SAMPLED


def test_worker_spans_join_the_lease_trace_and_only_then():
    with tracing.joined("worker lease", SAMPLED) as span:
        assert tracing.trace_id_of(tracing.current_traceparent()) == TRACE
        with tracing.child("worker checkpoint") as ckpt:
            assert ckpt is not None and ckpt.parent.span_id == span.get_span_context().span_id
    with tracing.joined("worker lease", None) as span:
        assert span is None and tracing.current_traceparent() is None
        with tracing.child("worker checkpoint") as ckpt:
            assert ckpt is None
