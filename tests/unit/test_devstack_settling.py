"""`infra up`'s setup steps are tried again while a cluster settles, and only then (devstack/settling.py)."""

from __future__ import annotations

import pytest
from cassandra import ReadTimeout
from cassandra.cluster import NoHostAvailable
from confluent_kafka import KafkaError, KafkaException

from spotreel.devstack.settling import settled, transient
from spotreel.platform.errors import InfraError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


@pytest.mark.parametrize("exc", [
    KafkaException(KafkaError(KafkaError._DESTROY_BROKER)),
    KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)),
    KafkaException(KafkaError(KafkaError._TRANSPORT)),
    ReadTimeout("Operation timed out - received only 1 responses."),
    NoHostAvailable("Unable to connect to any servers", {}),
    RuntimeError("Error from server: code=... INCOMPATIBLE_SCHEMA ..."),
])
def test_a_settling_cluster_s_failures_are_transient(exc):
    assert transient(exc)


@pytest.mark.parametrize("exc", [
    KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
    KafkaException(KafkaError(KafkaError.INVALID_PARTITIONS)),
    InfraError("kafka: topic t has 4 partitions, settings say 8"),
    ValueError("bad keyspace name"),
])
def test_other_failures_are_not(exc):
    assert not transient(exc)


def test_a_transient_failure_is_tried_again_with_growing_pauses_until_it_passes():
    clock, said, calls = Clock(), [], []

    def step():
        calls.append(clock.now)
        if len(calls) < 5:
            raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER))
        return "topics present"

    assert settled(step, "kafka", said.append, window_s=60, clock=clock, sleep=clock.sleep) == "topics present"
    assert clock.slept == [1, 2, 4, 5]
    assert len(said) == 4 and all("still settling" in line and "_DESTROY_BROKER" in line for line in said)


def test_a_lasting_transient_failure_ends_the_command_once_the_window_is_spent():
    clock, calls = Clock(), []

    def step():
        calls.append(clock.now)
        raise ReadTimeout("received only 1 responses")

    with pytest.raises(ReadTimeout):
        settled(step, "cassandra", lambda _: None, window_s=20, clock=clock, sleep=clock.sleep)
    assert clock.now <= 20 and calls[-1] == clock.now and len(calls) == 6  # 0, 1, 3, 7, 12, 17


def test_any_other_failure_ends_it_at_once():
    clock = Clock()

    def step():
        raise InfraError("kafka: topic t has 4 partitions, settings say 8")

    with pytest.raises(InfraError):
        settled(step, "kafka", lambda _: None, clock=clock, sleep=clock.sleep)
    assert clock.slept == []
