"""Submission: deterministic ids, idempotency, validation, run_at, unknown jobs and commands."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.events import CommandRejected, JobQueued, JobScheduled, JobSubmitted, JobWaiting
from spotreel.domain.evolve import fold
from spotreel.domain.state import Status
from tests.unit.jobkit import JOB, POOL, T0, Driver, kinds, rejection, submit

pytestmark = pytest.mark.unit


def test_submit_records_the_job_and_queues_it() -> None:
    d = Driver()
    out = d.submit()
    assert kinds(out) == ["JobSubmitted", "JobQueued"]
    assert [e.version for e in out] == [1, 2]
    assert all(e.at_ms == T0 and e.causation_id == "submit-key-1" and e.job_id == JOB for e in out)
    assert out[0].pool == POOL
    assert d.s.status == Status.QUEUED
    assert d.s.version == 2
    assert d.s.epoch == 0 and d.s.lease is None
    assert d.s.phase == "pending"


def test_same_key_same_body_is_a_no_op_even_after_the_job_ended() -> None:
    d = Driver()
    d.submit()
    assert d.submit() == ()
    d.cancel()
    assert d.submit() == ()
    assert d.s.status == Status.CANCELLED


def test_same_key_different_body_is_rejected() -> None:
    d = Driver()
    d.submit()
    before = d.state
    out = d.submit(request_hash="other")
    assert rejection(out) == "idempotency_key_reused"
    assert out[0].version == 2  # judged against version 2, takes no slot
    assert d.state == before


def test_job_id_must_be_derived_from_tenant_and_key() -> None:
    out = decide(None, submit(job_id="j-made-up"), T0)
    assert rejection(out) == "job_id_mismatch"
    assert out[0].version == 0 and out[0].current_epoch is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_steps": 0},
        {"fps": 0},
        {"duration_s": 0.0},
        {"duration_s": float("nan")},
        {"max_attempts": 0},
        {"max_preemptions": 0},
        {"keep_checkpoints": 0},
        {"backoff_base_ms": 10, "backoff_max_ms": 5},
        {"poison_threshold": 1},
        {"dag_policy": "whatever"},
        {"parents": ("a", "a")},
        {"parents": ("",)},
        {"model": ""},
    ],
)
def test_invalid_submissions_are_rejected(overrides: dict) -> None:
    assert rejection(decide(None, submit(**overrides), T0)) == "invalid_request"


def test_tenant_and_key_are_required() -> None:
    cmd = submit(tenant="", key="")
    assert rejection(decide(None, cmd, T0)) == "invalid_request"


def test_a_job_cannot_be_its_own_parent() -> None:
    out = decide(None, submit(parents=(JOB,)), T0)
    assert rejection(out) == "invalid_request"
    assert "dag_cycle" in out[0].detail


def test_run_at_in_the_future_schedules_the_job() -> None:
    d = Driver()
    out = d.submit(run_at_ms=T0 + 60_000)
    assert kinds(out) == ["JobSubmitted", "JobScheduled"]
    assert out[1].reason == "run_at" and out[1].run_at_ms == T0 + 60_000
    assert d.s.status == Status.SCHEDULED


def test_run_at_in_the_past_queues_at_once() -> None:
    d = Driver()
    out = d.submit(run_at_ms=T0 - 1)
    assert isinstance(out[1], JobQueued)


def test_early_activation_is_rejected_and_changes_nothing() -> None:
    d = Driver()
    d.submit(run_at_ms=T0 + 60_000)
    before = d.state
    assert rejection(d.activate(advance=59_999)) == "not_due"
    assert d.state == before
    out = d.activate(advance=1)
    assert kinds(out) == ["JobQueued"] and out[0].reason == "due"
    assert d.s.status == Status.QUEUED


def test_activation_of_a_job_that_is_not_scheduled_is_rejected() -> None:
    d = Driver()
    d.submit()
    assert rejection(d.activate()) == "not_scheduled"


def test_a_job_with_parents_starts_waiting() -> None:
    d = Driver()
    out = d.submit(parents=("p1", "p2"))
    assert isinstance(out[1], JobWaiting) and out[1].pending_parents == ("p1", "p2")
    assert d.s.status == Status.WAITING


@pytest.mark.parametrize("command", [cls for cls in c.JOB_COMMANDS if cls is not c.SubmitJob])
def test_every_command_for_an_unknown_job_is_rejected(command: type) -> None:
    fields = {
        "command_id": "x",
        "job_id": "nobody",
        "epoch": 1,
        "worker_id": "w",
        "pool": POOL,
        "lease_ttl_ms": 1,
        "priority": 1,
        "for_priority": 9,
        "parent_id": "p",
        "outcome": "succeeded",
        "child_id": "kid",
        "step": 1,
        "progress_pct": 1.0,
        "checkpoint_key": "k",
        "checksum": "c",
        "size_bytes": 1,
        "artifact_key": "a",
        "artifact_checksum": "c",
        "artifact_size_bytes": 1,
        "error_code": "e",
        "error_message": "m",
        "by": "tenant:t",
    }
    names = command.__dataclass_fields__
    cmd = command(**{k: v for k, v in fields.items() if k in names})
    out = decide(None, cmd, T0)
    assert rejection(out) == "unknown_job"
    assert out[0].command_type == command.__name__
    assert out[0].epoch_given == (1 if "epoch" in names else None)
    assert fold(out) is None


def test_an_unknown_command_is_rejected_not_raised() -> None:
    out = decide(None, object(), T0)
    assert isinstance(out[0], CommandRejected) and out[0].reason == "unknown_command"
    assert decide(None, c.FireOccurrence("f", "s"), T0)[0].reason == "unknown_command"


def test_job_ids_are_stable_and_documented() -> None:
    import hashlib

    want = "j" + hashlib.sha256(b"spotreel/job/v1\x00acme\x00key-1").hexdigest()[:32]
    assert ids.job_id_for("acme", "key-1") == want == JOB
    assert ids.job_id_for("acme", "key-2") != JOB
    # NUL separates the parts, so decide refuses it inside them (else these two would collide).
    for tenant, key in (("acme\x00key", "1"), ("acme", "key\x001")):
        cmd = submit(tenant=tenant, key=key)
        assert rejection(decide(None, cmd, T0)) == "invalid_request"


def test_request_hash_is_canonical() -> None:
    assert ids.request_hash({"a": 1, "b": [1, 2]}) == ids.request_hash({"b": [1, 2], "a": 1})
    assert ids.request_hash({"a": 1}) != ids.request_hash({"a": 2})


def test_submission_carries_every_setting_into_state() -> None:
    d = Driver()
    d.submit(priority=3, max_attempts=2, keep_checkpoints=5, callback_url="https://x", schedule_id="s",
             occurrence_ms=5)
    s = d.s
    assert (s.priority, s.max_attempts, s.keep_checkpoints, s.callback_url) == (3, 2, 5, "https://x")
    assert (s.schedule_id, s.occurrence_ms, s.tenant, s.idempotency_key) == ("s", 5, "acme", "key-1")
    assert isinstance(d.history[0], JobSubmitted)
    assert not isinstance(d.history[1], JobScheduled)
