"""The Kafka worker transport hears a preemption from the PreemptRequested event itself (as a pause from
PauseRequested), not only from its next renewal's verdict."""

from __future__ import annotations

import pytest

from spotreel.domain import events as ev
from spotreel.settings import Settings
from spotreel.worker.transport import WorkerProfile
from spotreel.worker.transport_kafka import KafkaTransport

pytestmark = pytest.mark.unit


def test_a_preempt_request_for_the_held_epoch_asks_the_worker_to_drain() -> None:
    t = KafkaTransport(Settings(), WorkerProfile("w1", "cpu", ("tiny",)))
    t._jobs["j1"] = (2, {"cancel": False, "drain": False})  # noqa: SLF001 - the held lease's flags
    t._instruct("j1", ev.PreemptRequested("j1", 7, 0, "preempt:j1:e1", "preempted_for", 1, 9))  # noqa: SLF001
    assert t._jobs["j1"][1]["drain"] is False  # an older epoch's request says nothing about this lease
    t._instruct("j1", ev.PreemptRequested("j1", 8, 0, "preempt:j1:e2", "preempted_for", 2, 9))  # noqa: SLF001
    assert t._jobs["j1"][1]["drain"] is True
