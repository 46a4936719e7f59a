"""The worker's cloud notice readers against metadata servers on 127.0.0.1.

AWS: AWS's own metadata mock (amazon-ec2-metadata-mock v1.13.0, built from source by devstack/imds_mock.py),
IMDSv2 only: the token flow (renewed before expiry, renewed after a 401), the spot interruption notice with
its deadline, the rebalance recommendation, no notice → nothing, and the watcher surviving a metadata
service that is not there yet; and real `spotreel worker` processes reading it: a spot interruption
mid-render → emergency checkpoint and release well inside the two minutes, the job resumed by another worker
with identical frames; a rebalance recommendation mid-render → a checkpoint at once, the job finished, no
new lease taken. GCP and Azure publish no emulator of their metadata services: their readers
run against tests/integration/metadata_servers.py, small servers written here from each documented protocol
(GCP's wait_for_change with ETags; Azure's Scheduled Events and their StartRequests approval).
"""

from __future__ import annotations

import threading
import time
import uuid
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from spotreel.platform.ports import free_port
from spotreel.domain import events as ev
from spotreel.worker.cloud_notices import gcp
from spotreel.worker.cloud_notices.aws import ACTION_PATH, AwsReader
from spotreel.worker.cloud_notices.azure import AzureReader
from spotreel.worker.cloud_notices.base import INTERRUPTION, REBALANCE
from spotreel.worker.cloud_notices.gcp import GcpReader
from spotreel.worker.cloud_notices.watcher import NoticeWatcher
from spotreel.worker.signals import PreemptionNotice
from tests.integration.metadata_servers import AzureMetadata, GcpMetadata
from tests.integration.workerkit import (STEPS, events_of, finished_by, reference_checksum, start_plane, stop_all,
                                         video_frames_checksum)

# serial: real workers rendering on two xdist workers take its first test (with the module plane) past 60 s.
pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(240)]

# Worker A's step HANG_STEP takes HANG_S longer (the pipeline's test-only hang hook), so the notice, sent
# once A is rendering, lands mid-render whatever this machine's speed.
HANG_STEP, HANG_S = 8, 8


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    yield from start_plane(settings, stack, tmp_path_factory.mktemp("cloud-notices"))


def rfc3339(seconds_from_now: float) -> tuple[str, float]:
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=seconds_from_now)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ"), at.timestamp()


def token_requests(mock) -> int:
    return mock.log.read_text().count("GenerateToken Received request")


def test_the_mock_is_imdsv2_only_and_the_reader_uses_a_session_token(imds_mock):
    mock = imds_mock(spot_after_s=0)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(mock.url + ACTION_PATH, timeout=2)
    assert refused.value.code == 401
    warning = AwsReader(mock.url).poll()
    assert warning is not None and warning.kind == INTERRUPTION
    assert token_requests(mock) >= 2  # the health check's and the reader's


def test_a_spot_interruption_gives_its_action_and_deadline(imds_mock):
    stamp, deadline = rfc3339(100)
    mock = imds_mock(spot_after_s=2, action="stop", action_time=stamp)
    reader = AwsReader(mock.url)
    assert reader.poll() is None  # before the mock's delay: 404
    time.sleep(max(0.0, mock.started_at + 2.5 - time.time()))
    warning = reader.poll()
    assert warning is not None and warning.kind == INTERRUPTION and warning.deadline == deadline
    assert warning.detail == f"spot stop at {stamp}"


def test_the_default_notice_time_is_two_minutes_ahead(imds_mock):
    warning = AwsReader(imds_mock(spot_after_s=0).url).poll()
    assert warning is not None and warning.deadline is not None
    assert 115 <= warning.deadline - time.time() <= 121


def test_a_rebalance_recommendation_is_told_once_and_is_not_an_interruption(imds_mock):
    reader = AwsReader(imds_mock(rebalance_after_s=0).url)
    first = reader.poll()
    assert first is not None and first.kind == REBALANCE and first.deadline is None
    assert [reader.poll() for _ in range(3)] == [None, None, None]


def test_no_notice_means_no_warning(imds_mock):
    reader = AwsReader(imds_mock().url)
    assert [reader.poll() for _ in range(5)] == [None] * 5


def test_the_token_is_renewed_before_it_expires(imds_mock):
    mock = imds_mock()
    reader = AwsReader(mock.url, token_ttl_s=2)
    assert reader.poll() is None
    before = token_requests(mock)
    time.sleep(2.2)  # the first token has expired at the mock
    assert reader.poll() is None
    assert token_requests(mock) == before + 1


def test_a_restarted_metadata_service_answers_401_and_the_reader_takes_a_new_token(imds_mock):
    first = imds_mock()
    reader = AwsReader(first.url)
    assert reader.poll() is None
    port = first.port
    first.stop()
    second = imds_mock(spot_after_s=0, port=port)  # knows none of the first one's tokens
    warning = reader.poll()
    assert warning is not None and warning.kind == INTERRUPTION
    assert "401" not in warning.detail and token_requests(second) >= 2


def test_the_watcher_waits_out_an_absent_service_then_triggers_with_the_deadline_grace(imds_mock, settings):
    port = free_port(settings.host)
    exits: list[int] = []
    notice = PreemptionNotice(20.0, exit_fn=exits.append)
    lines: list[tuple[str, dict]] = []
    watcher = NoticeWatcher(AwsReader(f"http://127.0.0.1:{port}"), notice, poll_s=0.5, margin_s=5.0,
                            report=lambda kind, **f: lines.append((kind, f))).start()
    try:
        time.sleep(1.5)
        assert watcher.failures >= 1 and not notice.requested  # refused: logged and retried, no crash
        stamp, deadline = rfc3339(13)
        imds_mock(spot_after_s=0, action_time=stamp, port=port)
        assert notice.wait(15)
        # The notice's deadline less the margin, shorter than the configured 20 s.
        assert notice.reason == "aws_interruption"
        assert deadline - 5.0 - 2.0 <= time.time() + notice.seconds_left() <= deadline - 5.0 + 0.5
        watcher.finish()  # the thread ends after an interruption, its report line written
        kind, fields = lines[0]
        assert kind == "cloud_notice" and fields["notice"] == INTERRUPTION and fields["grace_s"] < 13
    finally:
        watcher.finish()
    assert exits == []


# -- GCP and Azure: no official emulator exists, so these run against tests/integration/metadata_servers.py,
# small servers that speak each documented protocol.

def test_gcp_reader_hangs_on_the_value_and_returns_when_it_turns_true():
    with GcpMetadata() as server:
        reader = GcpReader(server.url, wait_s=30)
        assert reader.poll() is None  # the plain read: FALSE, and its ETag
        flipper = threading.Timer(1.0, server.set_preempted, (True,))
        flipper.start()
        began = time.time()
        warning = reader.poll()  # the hanging GET
        waited = time.time() - began
    assert warning is not None and warning.kind == INTERRUPTION
    assert 0.8 <= waited < 5, waited  # it waited for the change, and came back with it
    assert warning.deadline is not None and abs(warning.deadline - (began + waited + gcp.NOTICE_S)) < 1
    hanging = server.requests[-1]
    assert hanging["query"]["wait_for_change"] == "true" and hanging["query"]["last_etag"]
    assert all(r["headers"].get("Metadata-Flavor") == "Google" for r in server.requests)


def test_gcp_reader_comes_back_empty_after_the_wait_and_at_once_on_a_stale_etag():
    with GcpMetadata() as server:
        reader = GcpReader(server.url, wait_s=1)
        assert reader.poll() is None
        began = time.time()
        assert reader.poll() is None  # timeout_sec passed with the value unchanged
        assert 0.8 <= time.time() - began < 4
        # Changed between two hanging GETs: the next one answers at once, its last_etag being old.
        reader.wait_s = 30
        server.set_preempted(True)
        began = time.time()
        warning = reader.poll()
        assert warning is not None and time.time() - began < 2


def test_gcp_watcher_triggers_with_the_thirty_seconds_less_the_margin():
    notice = PreemptionNotice(60.0, exit_fn=lambda code: None)
    with GcpMetadata() as server:
        watcher = NoticeWatcher(GcpReader(server.url, wait_s=30), notice, poll_s=0.5, margin_s=5.0).start()
        try:
            time.sleep(0.5)
            server.set_preempted(True)
            assert notice.wait(10)
        finally:
            watcher.finish()
    assert notice.reason == "gcp_interruption" and 23 < notice.seconds_left() <= 25


def azure_preempt(event_id: str, seconds_ahead: float, resources: tuple[str, ...] = ("vm-1",)) -> dict:
    at = datetime.now(timezone.utc) + timedelta(seconds=seconds_ahead)
    return {"EventId": event_id, "EventType": "Preempt", "ResourceType": "VirtualMachine",
            "Resources": list(resources), "EventStatus": "Scheduled", "NotBefore": format_datetime(at, usegmt=True),
            "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}


def test_azure_reader_sees_only_this_vms_preempt_with_its_not_before():
    with AzureMetadata(vm_name="vm-1") as server:
        reader = AzureReader(server.url)
        assert reader.poll() is None
        server.schedule(azure_preempt("for-another", 30, resources=("vm-2",)))
        assert reader.poll() is None
        server.schedule(azure_preempt("ours", 30))
        warning = reader.poll()
    assert warning is not None and warning.kind == INTERRUPTION and "ours" in warning.detail
    assert warning.deadline is not None and 28 <= warning.deadline - time.time() <= 31
    assert all(r["headers"].get("Metadata") == "true" for r in server.requests)


def test_azure_watcher_triggers_then_approves_the_event_once_the_worker_is_done():
    notice = PreemptionNotice(60.0, exit_fn=lambda code: None)
    with AzureMetadata(vm_name="vm-1") as server:
        watcher = NoticeWatcher(AzureReader(server.url), notice, poll_s=0.3, margin_s=5.0).start()
        try:
            time.sleep(0.5)
            server.schedule(azure_preempt("evict-1", 30))
            assert notice.wait(10)
            # NotBefore (whole seconds) less the margin, under the configured 60 s.
            assert notice.reason == "azure_interruption" and 22 <= notice.seconds_left() <= 25
            assert server.approved == []  # not before the checkpoint and the release
        finally:
            watcher.finish()  # what the worker calls after its release
        assert server.approved == ["evict-1"] and server.events == []
        ack = [r for r in server.requests if r["method"] == "POST"]
        assert len(ack) == 1 and ack[0]["query"]["api-version"] == "2020-07-01"


# -- real workers --------------------------------------------------------------------------------------

def worker_reading(plane, monkeypatch, mock, name: str, model: str, *extra: str):
    from spotreel.worker.render_loop import TEST_HANG_ENV

    with monkeypatch.context() as m:
        for key, value in {**mock.worker_env(poll_s=1.0), TEST_HANG_ENV: f"{HANG_STEP}:{HANG_S}"}.items():
            m.setenv(key, value)
        return plane.worker(name, model, "http", *extra)


def rendering(worker, job_id: str) -> None:
    worker.wait_line(lambda l: l.get("event") == "step" and l.get("job_id") == job_id and l["step"] >= HANG_STEP - 2,
                     what="rendering")


def notice_now(imds_mock, quiet, **plan):
    """The notice at a moment of the test's choosing: the mock's delays count from its start, so the quiet
    one is replaced on the same port by one that sends at once (the reader takes a new token after its 401)."""
    quiet.stop()
    return imds_mock(port=quiet.port, **plan)


def last_step(worker) -> int:
    return max(l["step"] for l in worker.lines() if l.get("event") == "step")


def test_a_spot_interruption_mid_render_checkpoints_releases_and_the_job_resumes_identical(plane, imds_mock,
                                                                                              monkeypatch):
    ttl_ms = 60_000  # far longer than the hand-over may take: only a release explains it
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    common = ("--once", "--sampler", "ddim", "--checkpoint-every", "0.3", "--lease-ttl-ms", str(ttl_ms))
    quiet = imds_mock()
    a = worker_reading(plane, monkeypatch, quiet, "a", model, *common, "--grace", "15")
    b = None
    try:
        a.wait_ready()
        job = plane.submit(model, "ddim")
        a.wait_line(lambda l: l.get("event") == "leased" and l["job_id"] == job.job_id, what="lease")
        b = plane.worker("b", model, "kafka", *common)  # reads no notices (tests/conftest.py)
        rendering(a, job.job_id)
        sent_ms = time.time() * 1000
        notice_now(imds_mock, quiet, spot_after_s=0)
        told = a.wait_line(lambda l: l.get("event") == "cloud_notice", timeout=30, what="the cloud notice")
        assert a.wait_exit(60) == 0, a.logs()
        requeued = plane.bus.wait_event(job.job_id, ev.JobRequeued, timeout=30)
        done = finished_by(plane, job.job_id, b)
    finally:
        stop_all(a, b)
    # The notice's own deadline (two minutes), the grace it gave: the lesser of that less the margin and --grace.
    assert told["cloud"] == "aws" and told["notice"] == "interruption" and 110 <= told["deadline_in_s"] <= 121
    assert 14 <= told["grace_s"] <= 15
    released = events_of(plane.bus, job.job_id, ev.LeaseReleased)
    assert [(r.epoch, r.reason) for r in released] == [(1, "preempted")] and requeued.reason == "released"
    took_ms = requeued.at_ms - sent_ms
    print(f"notice → requeued in {took_ms / 1000:.1f} s")
    assert took_ms < 30_000, took_ms  # well inside the two minutes, and the TTL never ran out
    assert not events_of(plane.bus, job.job_id, ev.LeaseExpired)
    assert [o["outcome"] for o in a.outcomes()] == ["preempted"]
    stopped_at = last_step(a)
    assert 0 < stopped_at < STEPS  # mid-render: the notice can land before the slowed step on a quick box
    ckpts = [c for c in events_of(plane.bus, job.job_id, ev.CheckpointRecorded) if c.epoch == 1]
    assert ckpts[-1].step == stopped_at  # the emergency checkpoint holds the step A stopped at
    resumed = events_of(plane.bus, job.job_id, ev.JobLeased)[1]
    assert resumed.worker_id == b.worker_id and resumed.resume_step == stopped_at
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")


def test_a_rebalance_recommendation_mid_render_checkpoints_finishes_the_job_and_takes_no_other(plane, imds_mock,
                                                                                                monkeypatch):
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    quiet = imds_mock()
    # No --once and no periodic checkpoint in the run: the one checkpoint is the recommendation's, and the
    # worker stops after this job only because of it.
    a = worker_reading(plane, monkeypatch, quiet, "a", model, "--sampler", "ddim", "--checkpoint-every", "600")
    try:
        a.wait_ready()
        job = plane.submit(model, "ddim")
        rendering(a, job.job_id)
        notice_now(imds_mock, quiet, rebalance_after_s=0)
        told = a.wait_line(lambda l: l.get("event") == "cloud_notice", timeout=30, what="the recommendation")
        done = finished_by(plane, job.job_id, a)
    finally:
        a.stop()
    assert told["notice"] == "rebalance"
    assert done.epoch == 1 and [o["outcome"] for o in a.outcomes()] == ["succeeded"]
    ckpts = events_of(plane.bus, job.job_id, ev.CheckpointRecorded)
    # mid-render: the recommendation is sent from step HANG_STEP - 2 on, so it can land before the slowed step
    assert len(ckpts) == 1 and HANG_STEP - 2 <= ckpts[0].step < STEPS
    assert not events_of(plane.bus, job.job_id, ev.LeaseReleased)
    exit_line = [l for l in a.lines() if l.get("event") == "exit"]
    assert exit_line and exit_line[-1]["advised"] == "aws_rebalance" and exit_line[-1]["preempted"] is False
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")
