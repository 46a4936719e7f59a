"""The cloud notice readers' pure parts: each cloud's document → a warning with its deadline, the DMI
detection, the grace a deadline leaves, the backoff; and the PreemptionNotice advisory."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from email.utils import format_datetime
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from spotreel.worker.cloud_notices import aws, azure, gcp
from spotreel.worker.cloud_notices.base import INTERRUPTION, REBALANCE
from spotreel.worker.cloud_notices.detect import AZURE_ASSET_TAG, choose, cloud_of
from spotreel.worker.cloud_notices.watcher import MAX_BACKOFF_S, MIN_GRACE_S, backoff, grace_for
from spotreel.worker.signals import PreemptionNotice

pytestmark = pytest.mark.unit

stamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=timezone.utc))


@given(stamps, st.sampled_from(aws.ACTIONS))
def test_aws_instance_action_gives_the_action_and_its_time(at: datetime, action: str) -> None:
    body = json.dumps({"action": action, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")})
    warning = aws.parse_instance_action(body)
    assert warning is not None and warning.kind == INTERRUPTION and warning.deadline == at.timestamp()
    assert action in warning.detail


def test_aws_times_with_fractions_offsets_or_no_zone() -> None:
    base = datetime(2020, 1, 7, 1, 3, 47, tzinfo=timezone.utc).timestamp()
    assert aws.parse_time("2020-01-07T01:03:47Z") == base
    assert aws.parse_time("2020-01-07T01:03:47.500Z") == base + 0.5
    assert aws.parse_time("2020-01-07T03:03:47+02:00") == base
    assert aws.parse_time("2020-01-07T01:03:47") == base


def test_aws_unknown_action_is_no_notice_and_garbage_is_an_error() -> None:
    assert aws.parse_instance_action('{"action": "none", "time": "2020-01-07T01:03:47Z"}') is None
    for bad in ("<html>404</html>", "[]", '{"action": "terminate"}', '{"action": "stop", "time": "soon"}'):
        with pytest.raises((ValueError, KeyError)):
            aws.parse_instance_action(bad)


def test_aws_rebalance_has_no_deadline() -> None:
    warning = aws.parse_rebalance('{"noticeTime": "2020-10-27T08:22:00Z"}')
    assert warning.kind == REBALANCE and warning.deadline is None
    with pytest.raises(ValueError):
        aws.parse_rebalance("{}")


@given(st.floats(1, 1e5))
def test_aws_token_is_renewed_well_before_it_expires(ttl: float) -> None:
    assert 0 < aws.renew_before(ttl) <= min(60.0, ttl / 4)


def test_gcp_preempted_value() -> None:
    assert gcp.parse_preempted("TRUE") and gcp.parse_preempted("true\n")
    assert not gcp.parse_preempted("FALSE")
    with pytest.raises(ValueError):
        gcp.parse_preempted("")
    assert gcp.warning_for(False, 100.0) is None
    warning = gcp.warning_for(True, 100.0)
    assert warning is not None and warning.deadline == 100.0 + gcp.NOTICE_S


def azure_doc(*events: dict) -> str:
    return json.dumps({"DocumentIncarnation": 2, "Events": list(events)})


def azure_event(event_id: str, kind: str = "Preempt", resources: tuple[str, ...] = ("vm-1",),
                not_before: str = "Mon, 19 Sep 2016 18:29:47 GMT") -> dict:
    return {"EventId": event_id, "EventType": kind, "ResourceType": "VirtualMachine", "Resources": list(resources),
            "EventStatus": "Scheduled", "NotBefore": not_before, "Description": "", "EventSource": "Platform",
            "DurationInSeconds": -1}


@given(stamps)
def test_azure_preempt_for_this_vm_gives_not_before(at: datetime) -> None:
    body = azure_doc(azure_event("a", not_before=format_datetime(at, usegmt=True)))
    assert [(p.event_id, p.deadline) for p in azure.parse_events(body, "vm-1", 0.0)] == [("a", at.timestamp())]


def test_azure_keeps_only_this_vms_preempt_events_soonest_first() -> None:
    soon, later = "Mon, 19 Sep 2016 18:29:47 GMT", "Mon, 19 Sep 2016 18:30:47 GMT"
    body = azure_doc(azure_event("other-vm", resources=("vm-2",)), azure_event("reboot", kind="Reboot"),
                     azure_event("late", not_before=later), azure_event("early", not_before=soon),
                     azure_event("started", not_before=""))
    found = azure.parse_events(body, "vm-1", now=1474309000.0)
    assert [p.event_id for p in found] == ["started", "early", "late"]
    assert found[0].deadline == 1474309000.0 + azure.NOTICE_S
    # This VM's name unknown: every Preempt event counts.
    assert {p.event_id for p in azure.parse_events(body, None, 0.0)} == {"other-vm", "late", "early", "started"}
    assert azure.parse_events(azure_doc(), "vm-1", 0.0) == []
    with pytest.raises(ValueError):
        azure.parse_events("{}", "vm-1", 0.0)


def test_azure_start_requests_body() -> None:
    assert json.loads(azure.start_requests(["a", "b"])) == {"StartRequests": [{"EventId": "a"}, {"EventId": "b"}]}


@pytest.mark.parametrize("dmi, cloud", [
    ({"sys_vendor": "Amazon EC2\n", "product_name": "g5.xlarge\n"}, "aws"),
    ({"sys_vendor": "Xen\n", "bios_version": "4.11.amazon\n"}, "aws"),
    ({"sys_vendor": "Google\n", "product_name": "Google Compute Engine\n"}, "gcp"),
    ({"sys_vendor": "Microsoft Corporation\n", "product_name": "Virtual Machine\n"}, "azure"),
    ({"chassis_asset_tag": AZURE_ASSET_TAG + "\n"}, "azure"),
    ({"sys_vendor": "Dell Inc.\n", "product_name": "PowerEdge R750\n"}, None),
    ({"sys_vendor": "QEMU\n", "product_name": "Standard PC (Q35 + ICH9, 2009)\n"}, None),
    ({}, None),
])
def test_dmi_names_the_cloud(dmi: dict[str, str], cloud: str | None) -> None:
    assert cloud_of(dmi) == cloud


def test_choose_reads_the_dmi_files_only_for_auto(tmp_path: Path) -> None:
    (tmp_path / "sys_vendor").write_text("Google\n")
    assert choose("auto", tmp_path) == "gcp" and choose("", tmp_path) == "gcp"
    assert choose("aws", tmp_path) == "aws" and choose("AZURE", tmp_path) == "azure"
    assert choose("off", tmp_path) is None
    assert choose("auto", tmp_path / "absent") is None  # no DMI at all: no cloud, off
    with pytest.raises(ValueError, match="SPOTREEL_CLOUD_NOTICES"):
        choose("ec2", tmp_path)


@given(st.floats(0, 1e6), st.floats(-1e3, 1e3), st.floats(0, 60))
def test_grace_is_the_deadline_less_the_margin_never_below_the_floor(now: float, ahead: float, margin: float) -> None:
    grace = grace_for(now + ahead, now, margin)
    assert grace is not None and grace >= MIN_GRACE_S
    if ahead - margin >= MIN_GRACE_S:
        assert grace == pytest.approx(ahead - margin)
    assert grace_for(None, now, margin) is None


@given(st.integers(1, 100), st.floats(0.1, 10))
def test_backoff_doubles_from_the_poll_interval_and_is_capped(failures: int, poll: float) -> None:
    wait = backoff(failures, poll)
    assert min(poll, MAX_BACKOFF_S) <= wait <= MAX_BACKOFF_S
    assert backoff(failures + 1, poll) >= wait


def test_a_notice_takes_the_lesser_of_its_grace_and_the_configured_one() -> None:
    exits: list[int] = []
    notice = PreemptionNotice(20.0, exit_fn=exits.append)
    notice.trigger("aws_interruption", 115.0)
    assert 19.0 < notice.seconds_left() <= 20.0
    short = PreemptionNotice(20.0, exit_fn=exits.append)
    short.trigger("gcp_interruption", 3.0)
    assert short.seconds_left() <= 3.0


def test_an_advisory_is_not_a_notice() -> None:
    notice = PreemptionNotice(20.0, exit_fn=lambda code: None)
    notice.advise("aws_rebalance")
    notice.advise("second")
    assert notice.advised and notice.advice == "aws_rebalance"
    assert not notice.requested and notice.seconds_left() == float("inf")


