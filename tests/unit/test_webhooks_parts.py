"""The notifier's pure parts: signatures, address policy, retry delays, committable offsets, payloads."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp.abc import AbstractResolver

from spotreel.domain import events as ev
from spotreel.webhooks import signing
from spotreel.services.webhooks.addresses import GuardedResolver, RefusedAddress, check_url, why_refused
from spotreel.services.webhooks.backoff import RetryPolicy, retryable
from spotreel.services.webhooks.offsets import OffsetTracker
from spotreel.services.webhooks.payload import notification_for

SECRET = "whsec_test"


def test_signature_verifies_and_rejects_tampering_other_secrets_and_old_timestamps():
    body = b'{"id":"j1.v3"}'
    h = signing.headers(SECRET, 1_700_000_000, body, "j1.v3", "video.succeeded")
    signing.verify(SECRET, h, body, now_s=1_700_000_010)
    with pytest.raises(signing.BadSignature, match="no signature"):
        signing.verify(SECRET, h, body + b" ", now_s=1_700_000_010)
    with pytest.raises(signing.BadSignature, match="no signature"):
        signing.verify("whsec_other", h, body, now_s=1_700_000_010)
    with pytest.raises(signing.BadSignature, match="away from now"):
        signing.verify(SECRET, h, body, now_s=1_700_000_000 + 301)
    # The timestamp is signed: a fresh timestamp on an old signature does not verify.
    with pytest.raises(signing.BadSignature):
        signing.verify(SECRET, {**h, signing.TIMESTAMP_HEADER: "1700000100"}, body, now_s=1_700_000_100)
    with pytest.raises(signing.BadSignature, match="malformed"):
        signing.verify(SECRET, {}, body, now_s=1)


@pytest.mark.parametrize("address, what", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.9", "private"),
    ("192.168.1.1", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("fd00::5", "private"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"),
    ("::ffff:127.0.0.1", "loopback"), ("100.64.0.1", "not a globally routable"), ("2002:7f00:1::", "loopback"),
])
def test_non_public_addresses_are_refused_with_what_they_are(address, what):
    assert what in (why_refused(address) or "")


def test_public_addresses_pass():
    assert why_refused("93.184.215.14") is None
    assert why_refused("2606:2800:21f:cb07:6820:80da:af6b:8b2c") is None


class FixedResolver(AbstractResolver):
    """Stands in for DNS: a rebinding name answers a public address first and loopback afterwards."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)

    async def resolve(self, host, port=0, family=0):
        hosts = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [{"hostname": host, "host": h, "port": port, "family": 2, "proto": 0, "flags": 0} for h in hosts]

    async def close(self):
        pass


def test_every_resolved_address_is_checked_and_again_at_connect_time():
    async def run():
        with pytest.raises(RefusedAddress, match="10.0.0.1"):
            await check_url("https://hooks.example/x", False, FixedResolver(["93.184.215.14", "10.0.0.1"]))
        rebinding = FixedResolver(["93.184.215.14"], ["127.0.0.1"])
        await check_url("https://rebind.example/x", False, rebinding)  # the check sees a public address
        with pytest.raises(RefusedAddress, match="loopback"):
            await GuardedResolver(False, rebinding).resolve("rebind.example", 443)  # the connect does not
        await check_url("http://127.0.0.1:9/x", True)  # allowed when configured
        with pytest.raises(RefusedAddress, match="not an http"):
            await check_url("ftp://example.com/", True)
    asyncio.run(run())


def test_retry_delays_grow_with_full_jitter_up_to_the_cap():
    policy = RetryPolicy(max_attempts=10, base_s=1.0, cap_s=30.0)
    rnd = random.Random(1)
    for n, ceiling in [(1, 1), (2, 2), (3, 4), (5, 16), (6, 30), (9, 30)]:
        samples = [policy.delay(n, rnd) for _ in range(200)]
        assert 0 <= min(samples) and max(samples) <= ceiling
        assert max(samples) > ceiling * 0.8  # the whole range is used
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    assert retryable(500) and retryable(429) and retryable(408)
    assert not retryable(400) and not retryable(410) and not retryable(404)


def test_committable_offset_is_the_oldest_unfinished_delivery():
    t, tp = OffsetTracker(), ("events", 0)
    for off in range(5):
        t.read(tp, off)
    assert t.to_commit() == {tp: 5}
    t.committed({tp: 5})
    t.begin(tp, 5)
    t.read(tp, 5)
    t.begin(tp, 7)
    for off in (6, 7, 8):
        t.read(tp, off)
    assert t.to_commit() == {} and t.in_flight() == 2  # 5 is still being delivered: stay at 5
    t.done(tp, 7)
    assert t.to_commit() == {}
    t.done(tp, 5)
    assert t.to_commit() == {tp: 9}
    t.committed({tp: 9})
    assert t.to_commit() == {}
    t.forget({tp})
    assert t.to_commit() == {}


def test_only_terminal_events_notify_and_the_body_depends_on_the_event_alone():
    done = ev.JobSucceeded("j1", 7, 1000, "c", 2, "videos/j1/2.mp4", "abc", 123)
    a, b = notification_for(done, "http://gw"), notification_for(done, "http://gw")
    assert a == b and a.event_id == "j1.v7" and a.event_type == "video.succeeded"
    assert b'"content_url":"http://gw/v1/videos/j1/content"' in a.body
    assert notification_for(ev.JobQueued("j1", 2, 1000, "c", "submitted"), "http://gw") is None
    failed = notification_for(ev.JobFailed("j1", 8, 1000, "c", "boom", "E_OOM"), "http://gw")
    assert failed.event_type == "video.failed" and b'"error_code":"E_OOM"' in failed.body
