"""The scheduler's dispatch policy comes from its settings (services/scheduler/policies.py); the settings'
defaults are the domain's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig
from spotreel.services.scheduler.policies import dispatch_config, resume_hold_ms
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def test_the_default_settings_give_the_domains_default_policy() -> None:
    assert dispatch_config(Settings()) == DispatchConfig()
    assert resume_hold_ms(Settings()) == 10_000


def test_each_setting_reaches_the_policy() -> None:
    s = Settings.from_env({"SPOTREEL_DISPATCH_AGING_STEP_S": "30", "SPOTREEL_DISPATCH_AGING_MAX_BOOST": "2",
                           "SPOTREEL_DISPATCH_MAX_WAIT_S": "0", "SPOTREEL_DISPATCH_MODEL_AFFINITY": "0",
                           "SPOTREEL_DISPATCH_RESUME_HOLD_S": "0"})
    assert dispatch_config(s) == DispatchConfig(aging=AgingPolicy(step_ms=30_000, max_boost=2, max_wait_ms=None),
                                                model_affinity=False)
    assert resume_hold_ms(s) == 0


@pytest.mark.parametrize("field,value", [("dispatch_aging_step_s", -1), ("dispatch_aging_max_boost", -2),
                                         ("dispatch_max_wait_s", -5)])
def test_a_value_the_policy_cannot_take_names_its_variable(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"SPOTREEL_{field.upper()}"):
        dispatch_config(replace(Settings(), **{field: value}))
