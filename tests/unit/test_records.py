"""domain/records.replace gives exactly what dataclasses.replace gives, faster where that is safe."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain.fairness import TenantPolicy
from spotreel.domain.records import replace
from tests.unit.jobkit import Driver, submit


def _running():
    d = Driver()
    d.send(submit())
    d.grant("w1")
    d.send(c.ReportProgress("p", d.job_id, d.s.epoch, "w1", 3, 15.0), advance=1_000)
    return d.s


@given(st.integers(0, 1_000), st.floats(0, 100), st.text(max_size=8), st.booleans())
def test_the_copy_equals_the_standard_one(step, pct, phase, cancel) -> None:
    s = _running()
    changes = {"step": step, "progress_pct": pct, "phase": phase, "cancel_requested": cancel}
    fast, slow = replace(s, **changes), dataclasses.replace(s, **changes)
    assert fast == slow and hash(fast) == hash(slow) and type(fast) is type(slow)
    assert s == _running()  # the original is untouched
    lease = replace(s.lease, expires_at_ms=step)
    assert lease == dataclasses.replace(s.lease, expires_at_ms=step)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.step = 1  # type: ignore[misc]


def test_unknown_fields_and_post_init_checks_behave_as_before() -> None:
    with pytest.raises(TypeError):
        replace(_running(), no_such_field=1)
    policy = TenantPolicy(2.0, 4)
    assert replace(policy, max_in_flight=2) == dataclasses.replace(policy, max_in_flight=2)
    with pytest.raises(ValueError):
        replace(policy, weight=0.0)  # __post_init__ still runs for records that have one
