"""The dispatch policy of a scheduler process, from its settings (docs/SETTINGS.md, `dispatch_*`): graded aging
and its bound, the starvation bound, model affinity and resume affinity. The domain's defaults
(`DispatchConfig()`) are the settings' defaults; tests/unit/test_scheduler_policies.py holds them equal."""

from __future__ import annotations

from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig
from spotreel.config.settings import Settings


def dispatch_config(settings: Settings) -> DispatchConfig:
    """Raises ValueError, naming the variable, for a value the policy cannot take."""
    if settings.dispatch_aging_step_s < 0:
        raise ValueError(f"SPOTREEL_DISPATCH_AGING_STEP_S must be >= 0, got {settings.dispatch_aging_step_s}")
    if settings.dispatch_aging_max_boost < -1:
        raise ValueError(f"SPOTREEL_DISPATCH_AGING_MAX_BOOST must be >= -1, got {settings.dispatch_aging_max_boost}")
    if settings.dispatch_max_wait_s < 0:
        raise ValueError(f"SPOTREEL_DISPATCH_MAX_WAIT_S must be >= 0, got {settings.dispatch_max_wait_s}")
    aging = AgingPolicy(
        step_ms=settings.dispatch_aging_step_s * 1000 or None,
        max_boost=None if settings.dispatch_aging_max_boost < 0 else settings.dispatch_aging_max_boost,
        max_wait_ms=settings.dispatch_max_wait_s * 1000 or None)
    return DispatchConfig(aging=aging, model_affinity=bool(settings.dispatch_model_affinity))


def resume_hold_ms(settings: Settings) -> int:
    if settings.dispatch_resume_hold_s < 0:
        raise ValueError(f"SPOTREEL_DISPATCH_RESUME_HOLD_S must be >= 0, got {settings.dispatch_resume_hold_s}")
    return settings.dispatch_resume_hold_s * 1000
