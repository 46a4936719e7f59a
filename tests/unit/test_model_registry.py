"""The operator's model registry: parsing (malformed entries refused naming the model and key), the checks a
submission must pass, and the gateway answering 422 naming the field and the allowed values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.model_registry import RegistryError, load, parse
from spotreel.api.config import GatewayConfig
from tests.unit.test_gateway_api import BODY, api, post  # noqa: F401  (api: the fixture)

pytestmark = pytest.mark.unit

REGISTRY = """
[models.wan-1_3b]
directory = "/models/wan"
family = "wan"
dtype = "bfloat16"
sizes = ["832x480", "480x832"]
frames = { min = 5, max = 81, step = 4 }
steps = { min = 1, max = 50 }
sampler = "unipc"
guidance_scale = 5.0
pool = "a100"

[models.tiny-t2v]
directory = "/models/tiny"
family = "unet3d"
dtype = "float32"
sizes = ["32x32"]
frames = { max = 16 }
steps = { max = 40 }
"""


@pytest.fixture
def registry(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text(REGISTRY)
    return load(path)


def test_entries_parse_with_defaults(registry):
    assert registry.names() == ["tiny-t2v", "wan-1_3b"]
    wan = registry.models["wan-1_3b"]
    assert (wan.family, wan.dtype, wan.sampler, wan.guidance_scale, wan.pool) == ("wan", "bfloat16", "unipc", 5.0,
                                                                                 "a100")
    assert wan.frame_rule() == "4n+1 from 5 to 81"
    tiny = registry.models["tiny-t2v"]
    assert (tiny.sampler, tiny.frames_min, tiny.frames_step, tiny.pool) == ("ddim", 1, 1, "any")


@pytest.mark.parametrize(("change", "words"), [
    ({"family": "hunyuan"}, "family must be one of"),
    ({"sampler": "flow_euler"}, "wan family's"),
    ({"sizes": ["832-480"]}, "sizes"),
    ({"frames": {"min": 9, "max": 5}}, "min is above"),
    ({"dtype": "int8"}, "dtype"),
    ({"colour": "red"}, "unknown keys"),
])
def test_malformed_entries_are_refused_naming_model_and_key(change, words):
    spec = {"directory": "/m", "family": "wan", "sizes": ["16x16"], "frames": {"max": 9}, "steps": {"max": 9},
            **change}
    with pytest.raises(RegistryError, match=words) as info:
        parse({"models": {"m1": spec}})
    assert "'m1'" in str(info.value)


def test_a_submission_is_checked_against_its_model(registry):
    ok = dict(model="wan-1_3b", resolution="832x480", duration_s=33 / 16, fps=16, num_steps=30)
    assert registry.problem(**ok) is None
    assert registry.problem(**{**ok, "model": "zeroscope"})[0] == "model"
    assert "tiny-t2v, wan-1_3b" in registry.problem(**{**ok, "model": "zeroscope"})[1]
    assert registry.problem(**{**ok, "resolution": "512x512"}) == (
        "resolution", "model wan-1_3b renders resolutions 832x480, 480x832; got '512x512'")
    # Off the 4n+1 grid is no problem (the gateway renders the nearest count); out of the range is.
    assert registry.problem(**{**ok, "duration_s": 2.0}) is None
    field, msg = registry.problem(**{**ok, "duration_s": 85 / 16})  # 85 > 81
    assert field == "duration" and "4n+1 from 5 to 81" in msg and "from 0.3125 to 5.0625 s" in msg
    assert registry.problem(**{**ok, "duration_s": 81 / 16}) is None and registry.problem(**{**ok, "duration_s": 5 / 16}) is None
    assert registry.problem(**{**ok, "duration_s": 4.9 / 16})[0] == "duration"  # under 5 frames
    assert registry.problem(**{**ok, "num_steps": 51}) == ("num_steps", "model wan-1_3b takes num_steps from 1 to 50")


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"model": "nope"}, "model", "known models: tiny-t2v, wan-1_3b"),
    ({"model": "wan-1_3b", "resolution": "256x256"}, "resolution", "832x480, 480x832"),
    ({"model": "wan-1_3b", "resolution": "832x480", "duration": 6, "fps": 16}, "duration", "4n+1 from 5 to 81"),
    ({"model": "tiny-t2v", "resolution": "32x32", "num_steps": 41}, "num_steps", "from 1 to 40"),
])
async def test_the_gateway_refuses_what_the_registry_does_not_allow(api, registry, change, field, words):  # noqa: F811
    client, deps = await api(GatewayConfig(models=registry))
    r = await post(client, {**BODY, **change})
    assert r.status == 422, await r.text()
    err = (await r.json())["error"]
    assert err["field"] == field and words in err["message"], err
    assert deps.commands.sent == []


async def test_the_gateway_accepts_what_the_registry_allows(api, registry):  # noqa: F811
    client, deps = await api(GatewayConfig(models=registry))
    r = await post(client, {**BODY, "model": "wan-1_3b", "resolution": "832x480", "duration": 2.0625, "fps": 16})
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert (sent.spec.model, sent.spec.resolution, sent.spec.fps) == ("wan-1_3b", "832x480", 16)


def test_a_size_rule_takes_every_side_it_allows():
    entry = parse({"models": {"m": {"directory": "/m", "family": "unet3d", "sizes": {"multiple": 8, "min": 16,
                                                                                        "max": 64},
                                    "frames": {"max": 9}, "steps": {"max": 9}}}}).models["m"]
    assert entry.size_allowed("16x64") and entry.size_allowed("32x24")
    assert not entry.size_allowed("8x16") and not entry.size_allowed("20x16") and not entry.size_allowed("72x16")
    assert "multiple of 8 from 16 to 64" in entry.size_rule()
    with pytest.raises(RegistryError, match="sizes.multiple"):
        parse({"models": {"m": {"directory": "/m", "family": "unet3d", "sizes": {"min": 32, "max": 16},
                                "frames": {"max": 9}, "steps": {"max": 9}}}})


def test_the_local_stacks_registry_lists_the_tiny_model_and_takes_the_gateways_defaults(tmp_path):
    from spotreel.model_registry import registry_path
    from spotreel.platform.seed import local_registry_text
    from spotreel.config.settings import Settings

    (tmp_path / "models.toml").write_text(local_registry_text(tmp_path))
    registry = load(tmp_path / "models.toml")
    assert registry.names() == ["tiny-t2v"]
    assert registry.models["tiny-t2v"].directory == str(tmp_path / "models" / "tiny-t2v")
    cfg = GatewayConfig()
    assert registry.problem(model=cfg.default_model, resolution=cfg.default_resolution,
                            duration_s=cfg.default_duration_s, fps=cfg.default_fps,
                            num_steps=cfg.default_num_steps) is None
    # The file `infra up` wrote is found when SPOTREEL_MODEL_REGISTRY is unset; the variable wins when set.
    assert registry_path(Settings(home=tmp_path)) == str(tmp_path / "models.toml")
    assert registry_path(Settings(home=tmp_path, model_registry="/etc/m.toml")) == "/etc/m.toml"
    assert registry_path(Settings(home=tmp_path / "none")) == ""


@given(n=st.integers(-10, 200), lo=st.integers(1, 40), step=st.integers(1, 16), span=st.integers(0, 30))
def test_the_snapped_frame_count_is_on_the_grid_and_nearest(n, lo, step, span):
    entry = parse({"models": {"m": {"directory": "/m", "family": "wan", "sizes": ["16x16"],
                                    "frames": {"min": lo, "max": lo + span * step, "step": step},
                                    "steps": {"max": 9}}}}).models["m"]
    snapped = entry.snap_frames(n)
    assert entry.frames_allowed(snapped)
    grid = range(entry.frames_min, entry.frames_max + 1, entry.frames_step)
    best = min(abs(g - n) for g in grid)
    assert snapped == max(g for g in grid if abs(g - n) == best)  # the nearest; of two, the longer
