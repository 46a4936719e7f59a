"""Tenant plans (domain/plans.py): a plan's values, overrides on top, what is refused."""

from __future__ import annotations

import pytest

from spotreel.domain import plans

pytestmark = pytest.mark.unit


def test_a_plan_gives_all_four_settings_and_overrides_replace_single_values():
    pro = plans.settings_for("pro")
    assert (pro.name, pro.weight, pro.max_in_flight, pro.rate_per_minute, pro.max_priority) == ("pro", 3.0, 20, 600, 7)
    tuned = plans.settings_for("pro", weight=5.0, max_priority=8)
    assert (tuned.name, tuned.weight, tuned.max_in_flight, tuned.max_priority) == ("pro", 5.0, 20, 8)
    assert plans.settings_for(None) == plans.CUSTOM


def test_plans_are_ordered_by_what_they_allow():
    free, pro, ent = (plans.PLANS[n] for n in ("free", "pro", "enterprise"))
    assert free.weight < pro.weight < ent.weight
    assert free.max_in_flight < pro.max_in_flight < ent.max_in_flight
    assert free.max_priority < pro.max_priority < ent.max_priority == plans.MAX_TIER


@pytest.mark.parametrize(("plan", "change", "words"), [
    ("gold", {}, "unknown plan"),
    ("free", {"weight": 0.0}, "weight must be positive"),
    ("free", {"max_in_flight": -1}, "max_in_flight"),
    ("free", {"rate_per_minute": 0}, "rate_per_minute"),
    ("free", {"max_priority": 10}, "max_priority must be between 0 and 9"),
])
def test_refused_settings_say_why(plan, change, words):
    with pytest.raises(ValueError, match=words):
        plans.settings_for(plan, **change)


def test_priority_allowed_up_to_the_ceiling():
    assert plans.priority_allowed(4, 4) and not plans.priority_allowed(5, 4)
    assert plans.priority_allowed(9, None)
    policy = plans.policy(3.0, 20)
    assert (policy.weight, policy.max_in_flight) == (3.0, 20)
