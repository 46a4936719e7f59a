"""The operator's job policy defaults (GatewayConfig.default_*: retry, preemptions, poison, stuck rule) reach
every SubmitJob the gateway and the Kafka client build; the built-in defaults hash as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.api.config import GatewayConfig, from_env, job_policy_problem
from spotreel.api.submission import build_submit, normalize
from spotreel.domain.commands import SubmitJob

pytestmark = pytest.mark.unit

OPERATOR = replace(GatewayConfig(), default_max_attempts=2, default_backoff_base_seconds=1,
                   default_backoff_max_seconds=4, default_max_preemptions=7, default_poison_threshold=4,
                   default_poison_window_seconds=30, default_stuck_steps=3, default_stuck_min_seconds=5)


def _submit(body: dict, cfg: GatewayConfig) -> SubmitJob:
    return build_submit("acme", "k1", normalize({"prompt": "a fox", **body}, cfg), 1_000, "c1", cfg)


def test_the_built_in_defaults_are_submit_jobs() -> None:
    got = _submit({}, GatewayConfig())
    plain = SubmitJob("c", "j", "t", "k", "h", "any", got.spec)
    for name in ("max_attempts", "backoff_base_ms", "backoff_max_ms", "max_preemptions", "poison_threshold",
                 "poison_window_ms", "stuck_steps", "stuck_min_ms"):
        assert getattr(got, name) == getattr(plain, name), name


def test_the_operators_defaults_reach_the_job() -> None:
    got = _submit({}, OPERATOR)
    assert (got.max_attempts, got.backoff_base_ms, got.backoff_max_ms, got.max_preemptions, got.poison_threshold,
            got.poison_window_ms, got.stuck_steps, got.stuck_min_ms) == (2, 1000, 4000, 7, 4, 30_000, 3, 5000)


def test_a_value_given_is_kept_even_when_it_is_the_built_in_default() -> None:
    got = _submit({"max_attempts": 5}, OPERATOR)
    assert got.max_attempts == 5
    # Under the built-in defaults spelling one out hashes like leaving it out, as before.
    assert _submit({"max_attempts": 5}, GatewayConfig()).request_hash == _submit({}, GatewayConfig()).request_hash


def test_a_default_the_domain_refuses_stops_the_gateway_with_the_variable() -> None:
    assert job_policy_problem(GatewayConfig()) is None
    with pytest.raises(ValueError, match="SPOTREEL_GATEWAY_DEFAULT_"):
        from_env({"SPOTREEL_GATEWAY_DEFAULT_MAX_ATTEMPTS": "0"})
    with pytest.raises(ValueError, match="poison"):
        from_env({"SPOTREEL_GATEWAY_DEFAULT_POISON_THRESHOLD": "1"})
