"""Retention of stored objects (domain/expiry.py), the janitor's event rule, and the gateway's 410 for an
expired video."""

from __future__ import annotations

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain import expiry
from spotreel.domain.state import Status
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.deps import Tenant
from spotreel.services.janitor.janitor import deletions_for
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, job_view

DAY_MS = 86_400_000
ALIVE = [Status.SUBMITTED, Status.SCHEDULED, Status.WAITING, Status.QUEUED, Status.LEASED, Status.RUNNING,
         Status.PAUSED]


def test_checkpoints_of_a_finished_job_go_at_once_of_a_retryable_one_after_the_retention():
    assert expiry.checkpoints_expire_at_ms(Status.SUCCEEDED, 1_000, 86_400) == 1_000
    assert expiry.checkpoints_expire_at_ms(Status.CANCELLED, 1_000, 86_400) == 1_000
    assert expiry.checkpoints_expire_at_ms(Status.FAILED, 1_000, 86_400) == 1_000 + DAY_MS
    assert expiry.checkpoints_expire_at_ms(Status.DEAD_LETTERED, 1_000, 60) == 61_000
    for status in ALIVE:
        assert expiry.checkpoints_expire_at_ms(status, 1_000, 0) is None


@given(st.sampled_from(sorted(Status.TERMINAL) + ALIVE), st.integers(0, 2**42), st.integers(0, 10**7),
       st.integers(0, 2**43))
def test_a_job_that_may_still_run_never_loses_its_checkpoints(status, updated, retention_s, now):
    # Still runnable: alive, or retryable (RequeueJob) and not yet evicted (domain/retention.evict_at).
    runnable = status in ALIVE or (status in Status.REQUEUEABLE and now < updated + retention_s * 1000)
    due = expiry.due(expiry.checkpoints_expire_at_ms(status, updated, retention_s), now)
    assert due == (not runnable and now >= updated)


def test_videos_expire_per_plan_and_only_once_succeeded():
    assert expiry.video_expires_at_ms(Status.SUCCEEDED, 5, "free") == 5 + 7 * DAY_MS
    assert expiry.video_expires_at_ms(Status.SUCCEEDED, 5, "pro") == 5 + 30 * DAY_MS
    assert expiry.video_expires_at_ms(Status.SUCCEEDED, 5, "enterprise") == 5 + 365 * DAY_MS
    assert expiry.video_expires_at_ms(Status.SUCCEEDED, 5, None) is None  # no plan: kept
    assert expiry.video_expires_at_ms(Status.SUCCEEDED, None, "free") is None
    assert expiry.video_expires_at_ms(Status.FAILED, 5, "free") is None
    assert not expiry.due(None, 10**15) and expiry.due(5, 5) and not expiry.due(6, 5)


def _recorded(job: str, key: str, pruned: tuple[str, ...]) -> ev.CheckpointRecorded:
    return ev.CheckpointRecorded(job_id=job, version=3, at_ms=1, causation_id="c", epoch=1, checkpoint_key=key,
                                 step=2, progress_pct=10.0, checksum="x", size_bytes=1, pruned_keys=pruned)


def test_the_janitor_deletes_pruned_keys_and_the_checkpoints_of_succeeded_and_cancelled_jobs_only():
    events = [
        _recorded("j1", "ckpt/j1/e00000001/s000003.ckpt", ("ckpt/j1/e00000001/s000001.ckpt",)),
        _recorded("j1", "ckpt/j1/e00000001/s000004.ckpt", ("ckpt/j1/e00000001/s000001.ckpt",)),  # a repeat
        ev.JobSucceeded(job_id="j2", version=9, at_ms=1, causation_id="c", epoch=1, artifact_key="videos/j2/v",
                        artifact_checksum="s", artifact_size_bytes=1),
        ev.JobCancelled(job_id="j3", version=4, at_ms=1, causation_id="c", reason="user"),
        ev.JobFailed(job_id="j4", version=5, at_ms=1, causation_id="c", reason="r", error_code="e"),
        ev.JobDeadLettered(job_id="j5", version=5, at_ms=1, causation_id="c", reason="poison", attempts_used=1,
                           preemptions=0),
    ]
    got = deletions_for(events)
    assert got.keys == ("ckpt/j1/e00000001/s000001.ckpt",)
    assert got.jobs == ("j2", "j3")  # failed and dead-lettered jobs can be retried: the sweep, later


def test_an_erased_job_loses_every_object_and_so_does_the_cancel_its_erasure_caused():
    events = [
        ev.JobErased(job_id="j1", version=3, at_ms=1, causation_id="c", by="tenant:t", reason="user"),
        ev.JobCancelled(job_id="j2", version=4, at_ms=1, causation_id="c", reason="erased"),
        ev.JobCancelled(job_id="j3", version=4, at_ms=1, causation_id="c", reason="user"),
    ]
    got = deletions_for(events)
    assert got.erased == ("j1", "j2") and got.jobs == ("j2", "j3")  # a plain cancel keeps its video


def test_codec_round_trip_keeps_pruned_keys():
    # The janitor reads pruned_keys off the wire; the field must survive the Avro codec.
    codec = Codec.default()
    e = _recorded("j1", "ckpt/j1/e00000001/s000003.ckpt", ("a", "b"))
    assert codec.decode_message(codec.encode_message(e)).pruned_keys == ("a", "b")


@pytest_asyncio.fixture(loop_scope="function")
async def content():
    made = []

    async def get(plan: str | None, finished_at_ms: int, now_ms: int):
        deps = fake_deps()
        deps.auth.tenants["tenant-a"] = Tenant("tenant-a", plan=plan)
        deps.clock_ms.now = now_ms
        job = "j" + "a" * 32
        deps.reads.jobs[job] = job_view(job, "tenant-a", "succeeded", updated_at_ms=finished_at_ms, version=9,
                                        result_key=f"videos/{job}/e00000001/video.mp4")
        client = TestClient(TestServer(create_app(Settings(), deps)))
        await client.start_server()
        made.append(client)
        return await client.get(f"/v1/videos/{job}/content", headers={"Authorization": "Bearer key-a"},
                                allow_redirects=False)

    yield get
    for c in made:
        await c.close()


async def test_content_of_an_expired_video_is_410_gone(content):
    finished = 1_700_000_000_000
    assert (await content("free", finished, finished + 7 * DAY_MS - 1)).status == 302
    gone = await content("free", finished, finished + 7 * DAY_MS)
    assert gone.status == 410
    err = (await gone.json())["error"]
    assert err["code"] == "video_expired" and err["expired_at_ms"] == finished + 7 * DAY_MS
    assert (await content("pro", finished, finished + 7 * DAY_MS)).status == 302
    assert (await content(None, finished, finished + 3650 * DAY_MS)).status == 302  # no plan: kept
