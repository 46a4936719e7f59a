"""The worker's AWS notice reader against AWS's own metadata mock (amazon-ec2-metadata-mock v1.13.0, built
from source by devstack/imds_mock.py), IMDSv2 only, on 127.0.0.1: the token flow (renewed before expiry,
renewed after a 401), the spot interruption notice with its deadline, the rebalance recommendation, no
notice → nothing, and the watcher surviving a metadata service that is not there yet.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from spotreel.devstack.ports import free_port
from spotreel.worker.cloud_notices.aws import ACTION_PATH, AwsReader
from spotreel.worker.cloud_notices.base import INTERRUPTION, REBALANCE
from spotreel.worker.cloud_notices.watcher import NoticeWatcher
from spotreel.worker.signals import PreemptionNotice

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


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
