"""The Kafka worker transport hears a preemption from the PreemptRequested event itself (as a pause from
PauseRequested), not only from its next renewal's verdict."""

from __future__ import annotations

import pytest

from spotreel.domain import events as ev
from spotreel.config.settings import Settings
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


class _Listener:
    """Records what the transport asks of its dispatch listener."""

    def __init__(self) -> None:
        self.dropped: list[tuple[str, str]] = []

    def observe(self, job_id, on_event) -> None:
        pass

    def drop_verdict(self, command_id: str, job_id: str) -> None:
        self.dropped.append((command_id, job_id))

    def close(self) -> None:
        pass


def test_a_forgotten_lease_stops_the_routing_of_its_pending_renewals_verdicts_and_close_stops_all() -> None:
    import time

    from spotreel.domain.spec import RenderSpec
    from spotreel.worker.transport import WorkerLease

    t = KafkaTransport(Settings(), WorkerProfile("w1", "cpu", ("tiny",)))
    listener = _Listener()
    t._listener = listener  # type: ignore[assignment]  # noqa: SLF001
    later = time.monotonic() + 60
    t._following.extend([(later, "c1", "j1"), (later + 1, "c2", "j2"), (later + 2, "c3", "j1")])  # noqa: SLF001
    lease = WorkerLease(job_id="j1", epoch=1, worker_id="w1", attempt=1, lease_ttl_ms=30_000, lease_expires_at_ms=0,
                        pool="tiny@cpu", gpu_type="cpu",
                        spec=RenderSpec(model="tiny", prompt="p", duration_s=1.0, resolution="32x32", fps=8, seed=1,
                                        num_steps=4))
    t.forget(lease)
    assert sorted(listener.dropped) == [("c1", "j1"), ("c3", "j1")]
    assert [f[1] for f in t._following] == ["c2"]  # noqa: SLF001 - another lease's, still in its time
    t.close()
    assert ("c2", "j2") in listener.dropped and not t._following  # noqa: SLF001
