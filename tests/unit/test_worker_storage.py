"""The worker's storage retries (worker/storage.py): the budget's waits, which errors are retried, and the loop
on a clock of the test's own. Against the real store: tests/integration/test_worker_storage_faults.py."""

from __future__ import annotations

import pytest
from botocore.exceptions import (ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
                                 ReadTimeoutError, ResponseStreamingError)
from hypothesis import given
from hypothesis import strategies as st

from spotreel.worker.storage import Budget, StorageUnavailable, call_within, transient

pytestmark = pytest.mark.unit


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@given(failures=st.integers(1, 80), fraction=st.floats(0, 1, exclude_max=True),
       base=st.floats(0.01, 2), extra=st.floats(0, 10))
def test_a_delay_is_equal_jitter_on_a_capped_exponential(failures, fraction, base, extra) -> None:
    b = Budget(60.0, base_s=base, cap_s=base + extra)
    ceiling = min(b.cap_s, base * 2 ** min(failures - 1, 30))
    d = b.delay(failures, fraction)
    assert ceiling / 2 - 1e-9 <= d <= ceiling + 1e-9
    assert b.delay(failures, 0.0) <= d  # more jitter, longer wait


@given(total=st.floats(0, 300), failures=st.integers(1, 50), elapsed=st.floats(0, 400),
       fraction=st.floats(0, 1, exclude_max=True))
def test_no_try_is_scheduled_past_the_budget(total, failures, elapsed, fraction) -> None:
    b = Budget(total)
    wait = b.wait_before(failures, elapsed, fraction)
    if elapsed >= total:
        assert wait is None
    elif total - elapsed >= b.base_s:
        assert wait is not None and 0 <= wait and elapsed + wait <= total + 1e-9
    else:
        assert wait is None or elapsed + wait <= total + 1e-9


@given(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=40), st.floats(0.5, 120))
def test_tries_go_on_until_the_budget_and_no_further(jitters, total) -> None:
    clock = FakeClock()
    draws = iter(jitters * 1000)
    calls = []

    def down():
        calls.append(clock.now)
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    with pytest.raises(StorageUnavailable) as caught:
        call_within(Budget(total), "upload of x", down, clock=clock, sleep=clock.sleep, rnd=lambda: next(draws))
    err = caught.value
    assert err.tries == len(calls) >= 2 and not err.interrupted
    assert all(t - calls[0] <= total + 1e-9 for t in calls)  # every try started inside the budget
    assert clock.now - calls[0] >= total - Budget(total).base_s  # nor gave up while a try still fitted
    assert str(err).startswith(f"upload of x failed after {err.tries} tries over ")
    assert "EndpointConnectionError" in str(err)


def test_a_store_that_comes_back_within_the_budget_is_only_latency() -> None:
    clock = FakeClock()
    retried = []

    def flaky():
        if clock.now < 120:  # down for the first 20 s
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1:1")
        return "stored"

    assert call_within(Budget(60), "checkpoint", flaky, clock=clock, sleep=clock.sleep, rnd=lambda: 0.5,
                       on_retry=retried.append) == "stored"
    assert len(retried) == len(clock.slept) >= 4 and 120 <= clock.now <= 125
    assert max(clock.slept) <= 4.0  # the cap: a store back at t=20 s is seen within seconds


def test_an_error_another_try_would_repeat_is_raised_at_once() -> None:
    clock = FakeClock()
    tries = []

    def refused():
        tries.append(1)
        raise _client_error("NoSuchBucket", 404)

    with pytest.raises(ClientError):
        call_within(Budget(60), "checkpoint", refused, clock=clock, sleep=clock.sleep)
    assert tries == [1] and clock.slept == []


def test_stop_ends_the_retries_early_as_interrupted() -> None:
    clock = FakeClock()

    def down():
        raise ConnectTimeoutError(endpoint_url="http://127.0.0.1:1")

    with pytest.raises(StorageUnavailable) as caught:
        call_within(Budget(60), "upload", down, stop=lambda: len(clock.slept) >= 2, clock=clock, sleep=clock.sleep)
    assert caught.value.interrupted and caught.value.tries == 2 and "upload stopped after 2 tries" in str(caught.value)


def test_a_zero_budget_tries_once() -> None:
    clock = FakeClock()
    with pytest.raises(StorageUnavailable) as caught:
        call_within(Budget(0), "checkpoint", lambda: (_ for _ in ()).throw(_client_error("SlowDown", 503)),
                    clock=clock, sleep=clock.sleep)
    assert caught.value.tries == 1 and "failed after 1 try over 0.0 s" in str(caught.value)


@pytest.mark.parametrize("exc, expected", [
    (EndpointConnectionError(endpoint_url="u"), True),  # nothing listens: killed, restarting
    (ConnectTimeoutError(endpoint_url="u"), True),
    (ReadTimeoutError(endpoint_url="u"), True),  # accepted, never answered: SIGSTOPped
    (ResponseStreamingError(error="reset"), True),  # cut mid-body
    (_client_error("InternalError", 500), True),
    (_client_error("ServiceUnavailable", 503), True),
    (_client_error("SlowDown", 503), True),
    (_client_error("TooManyRequests", 429), True),
    (_client_error("RequestTimeout", 400), True),  # S3 says 400 for it
    (_client_error("NoSuchKey", 404), False),
    (_client_error("PreconditionFailed", 412), False),
    (_client_error("AccessDenied", 403), False),
    (NoCredentialsError(), False),
    (ConnectionResetError(), True),
    (ValueError("a bug"), False),
])
def test_which_errors_are_transient(exc, expected) -> None:
    assert transient(exc) is expected


def test_a_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Budget(-1)
    with pytest.raises(ValueError):
        Budget(10, base_s=2, cap_s=1)
