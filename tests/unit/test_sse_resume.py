"""SSE resumption: the ids the gateway writes (the job's event version), what it sends a client that
reconnects with Last-Event-ID, and the client side that reconnects from the last id it saw (`spotreel
watch`, the demo's feed)."""

from __future__ import annotations

import asyncio
import http.client
from dataclasses import replace

import pytest
import pytest_asyncio

from spotreel.demo.feed import StatusFeed
from spotreel.api import sse
from spotreel.client.http import ClientError
from spotreel.client.watch import Watch
from spotreel.api.config import GatewayConfig
from tests.unit.gateway_fakes import fake_deps, job_view, serving

A = {"Authorization": "Bearer key-a"}
JOB = "j" + "a" * 32


# --- the resume rule and the framing -----------------------------------------------------------------------


@pytest.mark.parametrize("header, seen", [
    (None, -1), ("", -1), ("  ", -1), ("abc", -1), ("-3", -1), ("1.5", -1), ("１２", -1), ("9" * 19, -1),
    ("0", 0), ("7", 7), (" 12 ", 12),
])
def test_last_event_id_is_a_version_or_nothing_seen(header, seen):
    assert sse.resume_from(header) == seen


def test_only_versions_past_the_last_id_are_new():
    assert sse.is_new(0, sse.NOTHING_SEEN)  # a job known only from its claim is version 0
    assert not sse.is_new(4, 4) and not sse.is_new(3, 4) and sse.is_new(5, 4)


def test_frames_parse_back_with_their_ids():
    wire = (sse.frame("status", {"version": 3, "status": "queued"}, 3) + sse.KEEP_ALIVE
            + b"retry: 500\n\n" + sse.frame("status", {"note": "line\nbreak"}, 4) + b"event: end\ndata: {}\n\n")
    got = list(sse.parse(wire.splitlines(keepends=True)))
    assert [(m.event, m.id) for m in got] == [("status", "3"), ("status", "4"), ("end", "4")]
    assert got[0].data == {"status": "queued", "version": 3} and got[1].data == {"note": "line\nbreak"}


# --- the gateway: what a (re)connecting client is sent -----------------------------------------------------


@pytest_asyncio.fixture(loop_scope="function")
async def gw():
    deps = fake_deps()
    deps.reads.jobs[JOB] = job_view(JOB, "tenant-a", "queued", version=2)
    async with serving(deps, GatewayConfig(stream_poll_seconds=0.01)) as client:
        yield client, deps


async def next_message(resp, timeout: float = 5.0) -> sse.Message:
    block = []
    while True:
        line = await asyncio.wait_for(resp.content.readline(), timeout)
        assert line, "the stream ended"
        block.append(line)
        if line in (b"\n", b"\r\n"):
            got = list(sse.parse(block))
            if got:
                return got[0]
            block = []


def set_job(deps, status: str, version: int) -> None:
    deps.reads.jobs[JOB] = replace(deps.reads.jobs[JOB], status=status, version=version)


async def test_every_event_carries_the_version_as_its_id(gw):
    client, deps = gw
    r = await client.get(f"/v1/videos/{JOB}/stream", headers=A)
    first = await next_message(r)
    assert (first.event, first.id, first.data["version"]) == ("status", "2", 2)
    set_job(deps, "paused", 5)
    second = await next_message(r)
    assert (second.id, second.data["status"]) == ("5", "paused")
    set_job(deps, "cancelled", 6)
    assert (await next_message(r)).id == "6"
    end = await next_message(r)
    assert (end.event, end.id) == ("end", "6")


async def test_a_resumed_stream_repeats_nothing_and_misses_nothing(gw):
    client, deps = gw
    set_job(deps, "paused", 5)
    r = await client.get(f"/v1/videos/{JOB}/stream", headers={**A, "Last-Event-ID": "5"})
    with pytest.raises(asyncio.TimeoutError):  # many polls of the version the client has: nothing sent
        await asyncio.wait_for(r.content.readline(), 0.2)
    set_job(deps, "queued", 6)
    got = await next_message(r)
    assert (got.id, got.data["status"]) == ("6", "queued")
    # Behind the client's id (another replica's read model lagging): still nothing old.
    r2 = await client.get(f"/v1/videos/{JOB}/stream", headers={**A, "Last-Event-ID": "4"})
    assert (await next_message(r2)).id == "6"
    r.close()
    r2.close()


async def test_resuming_an_ended_job_gets_only_the_end(gw):
    client, deps = gw
    set_job(deps, "cancelled", 7)
    text = await (await client.get(f"/v1/videos/{JOB}/stream", headers={**A, "Last-Event-ID": "7"})).text()
    assert text == "id: 7\nevent: end\ndata: {}\n\n"
    # An id the gateway never wrote counts as nothing seen: the whole current state, then the end.
    text = await (await client.get(f"/v1/videos/{JOB}/stream", headers={**A, "Last-Event-ID": "x7"})).text()
    assert [m.event for m in sse.parse(text.splitlines(keepends=True))] == ["status", "end"]


# --- the client: reconnecting from the last id seen --------------------------------------------------------


def status(version: int, state: str) -> sse.Message:
    return sse.Message("status", {"version": version, "status": state}, str(version))


class ScriptedClient:
    """Each connection plays the next script: messages, then an exception or a clean end."""

    def __init__(self, *scripts):
        self.scripts = list(scripts)
        self.asked: list[str | None] = []

    def messages(self, job_id, last_event_id=None, timeout=120.0):
        self.asked.append(last_event_id)
        return self._play(self.scripts.pop(0))

    @staticmethod
    def _play(script):
        for item in script:
            if isinstance(item, BaseException):
                raise item
            yield item


def test_watch_reconnects_with_the_last_id_and_yields_each_state_once():
    client = ScriptedClient(
        [status(2, "queued"), status(3, "leased"), ConnectionResetError("reset")],
        [http.client.IncompleteRead(b"")],  # dropped before anything new
        [ClientError("cannot reach the gateway")],  # gateway restarting
        [status(4, "running"), sse.Message("end", {}, "4")],  # the gateway's maximum stream length
        [status(5, "succeeded"), sse.Message("end", {}, "5")],
    )
    pauses: list[float] = []
    w = Watch(client, JOB, sleep=pauses.append, backoff=0.5)
    assert [s["version"] for s in w] == [2, 3, 4, 5]
    assert client.asked == [None, "3", "3", "3", "4"]
    assert w.status == "succeeded" and w.last_event_id == "5" and w.reconnects == 4
    assert pauses == [0.5, 1.0, 2.0, 0.5]  # backoff grows while nothing arrives; a deadline end is no failure


def test_watch_gives_up_after_consecutive_drops_and_stops_on_refusals():
    w = Watch(ScriptedClient(*[[ConnectionResetError("reset")]] * 4), JOB, reconnects=3, sleep=lambda s: None)
    with pytest.raises(ClientError, match="dropped 4 times in a row"):
        list(w)
    refused = ScriptedClient([ClientError("the gateway answered 404 not_found: no such video", 404, "not_found")])
    with pytest.raises(ClientError, match="404"):
        list(Watch(refused, JOB, sleep=lambda s: None))
    assert refused.asked == [None]
    busy = ScriptedClient([ClientError("503", 503, "store_unavailable")], [status(9, "failed")])
    assert [s["status"] for s in Watch(busy, JOB, sleep=lambda s: None)] == ["failed"]


def test_demo_feed_resumes_from_the_last_id(monkeypatch):
    monkeypatch.setattr("spotreel.demo.feed.time.sleep", lambda s: None)
    client = ScriptedClient([status(2, "queued"), ConnectionResetError("reset")], [status(3, "succeeded")])
    feed = StatusFeed(client, JOB).start()
    got = [feed.next(5.0), feed.next(5.0)]
    assert [d["version"] for _, d in got] == [2, 3] and client.asked == [None, "2"]
