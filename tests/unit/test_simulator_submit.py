"""The simulator's clients behave as product clients do: a submission refused with 429 or 503 comes back after
the answer's Retry-After with the same Idempotency-Key, a bounded number of times (fleetsim/fleet.py `_submit`)."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from types import SimpleNamespace

import pytest

from spotreel.fleetsim.fleet import SUBMIT_REFUSALS_MAX, _submit

pytestmark = pytest.mark.unit


def client(answers: list[tuple[int, dict | None]]):
    calls: list[dict] = []

    async def call(kind, path, body, key=None, headers=None, timeout=30.0):
        calls.append({"kind": kind, "path": path, "key": key, **(headers or {})})
        return answers.pop(0) if answers else (503, {"error": {"code": "overloaded", "retry_after_s": 2}})

    sh = SimpleNamespace(call=call, tenant_keys={"acme": "k-acme"}, model="tiny-t2v", gpu_type="sim",
                         cfg=SimpleNamespace(steps=4), accepted=[], refused=defaultdict(int),
                         rng=random.Random(7), stopping=asyncio.Event())
    return sh, calls, []


def overloaded(after_s: int) -> tuple[int, dict]:
    return 503, {"error": {"code": "overloaded", "retry_after_s": after_s}}


async def test_a_refused_submission_comes_back_after_its_retry_after_with_the_same_key() -> None:
    sh, calls, slept = client([overloaded(3), (429, {"error": {"code": "rate_limited", "retry_after_s": 1}}),
                               (202, {"job_id": "j1"})])
    await _submit(sh, "acme", 5, sleep=_recorder(slept))
    assert [a.job_id for a in sh.accepted] == ["j1"] and sh.accepted[0].tier == 5
    assert dict(sh.refused) == {"overloaded": 1, "rate_limited": 1}
    assert len({c["Idempotency-Key"] for c in calls}) == 1 and len(calls) == 3
    assert 3 <= slept[0] <= 3 * 1.2 and 1 <= slept[1] <= 1.2  # Retry-After, spread by up to a fifth


async def test_a_client_refused_again_and_again_gives_up_and_says_so() -> None:
    sh, calls, slept = client([])
    await _submit(sh, "acme", 0, sleep=_recorder(slept))
    assert sh.accepted == [] and len(calls) == SUBMIT_REFUSALS_MAX
    assert dict(sh.refused) == {"overloaded": SUBMIT_REFUSALS_MAX, "gave_up": 1}


async def test_no_answer_is_tried_three_times_then_counted() -> None:
    sh, calls, slept = client([(0, None), (502, None), (0, None)])
    await _submit(sh, "acme", 0, sleep=_recorder(slept))
    assert sh.accepted == [] and len(calls) == 3 and slept == [0.5, 0.5, 0.5]
    assert dict(sh.refused) == {"no_answer": 1}


async def test_a_run_that_is_stopping_does_not_wait_out_a_refusal() -> None:
    sh, calls, slept = client([overloaded(30)])
    sh.stopping.set()
    await _submit(sh, "acme", 0, sleep=_recorder(slept))
    assert slept == [] and dict(sh.refused) == {"overloaded": 1, "gave_up": 1}


def _recorder(slept: list[float]):
    async def sleep(s: float) -> None:
        slept.append(s)
    return sleep
