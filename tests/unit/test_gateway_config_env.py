"""Every gateway knob can be set from the environment (SPOTREEL_GATEWAY_<NAME>), a bad value is refused by
name, and with none set the gateway runs on the class's defaults."""

from __future__ import annotations

from dataclasses import fields

import pytest

from spotreel.api.config import ENV_PREFIX, GatewayConfig, from_env


def _other(value):
    if isinstance(value, bool) or value is None:
        raise AssertionError(f"a knob of unexpected type: {value!r}")
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value + 0.25
    return f"{value}-x"


def test_no_variable_set_gives_the_defaults():
    assert from_env({}) == GatewayConfig()


def test_every_knob_but_models_is_read_from_its_variable():
    defaults = GatewayConfig()
    knobs = [f.name for f in fields(GatewayConfig) if f.name != "models"]
    wanted = {name: _other(getattr(defaults, name)) for name in knobs}
    cfg = from_env({ENV_PREFIX + name.upper(): str(value) for name, value in wanted.items()})
    assert {name: getattr(cfg, name) for name in knobs} == wanted
    assert len(knobs) >= 40


def test_a_value_of_the_wrong_type_is_refused_by_name():
    with pytest.raises(ValueError, match="SPOTREEL_GATEWAY_MAX_FPS must be an integer"):
        from_env({"SPOTREEL_GATEWAY_MAX_FPS": "60.5"})
    with pytest.raises(ValueError, match="SPOTREEL_GATEWAY_VERDICT_SECONDS must be a number"):
        from_env({"SPOTREEL_GATEWAY_VERDICT_SECONDS": "soon"})
