"""Every route the app serves is in the OpenAPI document, and every documented operation is served."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable

import jsonschema_rs

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.services.gateway.app import create_app
from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError
from spotreel.services.gateway.openapi import IDEMPOTENCY, document
from spotreel.api.submission import check_idempotency_key, normalize
from spotreel.model_registry import parse
from spotreel.services.gateway.public.videos import STATUSES
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps


def _accepted(check: Callable[[], object]) -> bool:
    """Whether the gateway's own check passes (it refuses with an ApiError)."""
    try:
        check()
    except ApiError:
        return False
    return True


def _served() -> set[tuple[str, str]]:
    app = create_app(Settings(), fake_deps())
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "OPTIONS"):
            continue
        out.add((route.method.lower(), route.resource.canonical))
    return out


def test_router_and_document_agree():
    doc = document()
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert _served() == documented


def test_document_shape():
    doc = document()
    assert doc["openapi"].startswith("3.")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (method, path)
            if "{id}" in path:
                assert any(p["name"] == "id" for p in op["parameters"]), (method, path)


def _schema(doc, path, method):
    return doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


def test_every_rule_the_gateway_enforces_is_documented():
    cfg = replace(GatewayConfig(), max_page_size=77, max_fps=30)
    doc = document(cfg)
    listing = {p["name"]: p["schema"] for p in doc["paths"]["/v1/videos"]["get"]["parameters"]}
    assert listing["status"]["enum"] == sorted(STATUSES)
    assert (listing["limit"]["minimum"], listing["limit"]["maximum"]) == (1, 77)
    patch = _schema(doc, "/v1/videos/{id}", "patch")
    assert patch["required"] == ["priority"] and patch["additionalProperties"] is False
    assert (patch["properties"]["priority"]["minimum"], patch["properties"]["priority"]["maximum"]) == (0, 9)
    submit = _schema(doc, "/v1/videos", "post")
    assert {"properties": {"run_at": {"type": "null"}}} in submit["allOf"][0]["anyOf"]
    assert "exclusive with delay_seconds" in submit["properties"]["run_at"]["description"]
    assert submit["properties"]["fps"]["maximum"] == 30
    resolution = submit["properties"]["resolution"]
    assert "multiple of 8 from 16 to 1920" in resolution["description"]
    assert "other than 0 and 22" in submit["properties"]["callback_url"]["description"]
    node = _schema(doc, "/v1/dags", "post")["properties"]["nodes"]["items"]
    assert node["allOf"] == submit["allOf"] and node["properties"]["resolution"] == resolution
    for path in ("/v1/videos", "/v1/dags"):
        [key] = [p for p in doc["paths"][path]["post"]["parameters"] if p["name"] == "Idempotency-Key"]
        assert key["schema"]["maxLength"] == 200 and key["schema"]["pattern"] == IDEMPOTENCY["schema"]["pattern"]
    assert "405" in doc["info"]["description"] and "Allow" in doc["info"]["description"]


def test_media_type_and_size_answers_are_documented_where_they_can_happen():
    doc = document()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert {"414", "431"} <= set(op["responses"]), (method, path)
            public_body = method in ("post", "patch", "delete") and not path.startswith("/internal/")
            if path.startswith("/openai/"):  # its own parsing: 415 where it reads a body (a form or JSON)
                public_body = "requestBody" in op
            assert ("415" in op["responses"]) == public_body, (method, path)
    assert set(doc["components"]["responses"]) == {"UriTooLong", "HeaderTooLarge"}


@given(key=st.one_of(st.text(st.characters(max_codepoint=0x7f, blacklist_characters="\n\r"), max_size=210),
                     st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=195, max_size=205),
                     st.just("schedule:s1:1700000000000"), st.just("schedule")))
def test_the_documented_idempotency_key_pattern_is_the_gateways_rule(key):
    documented = re.compile(IDEMPOTENCY["schema"]["pattern"])
    assert bool(documented.search(key)) == _accepted(lambda: check_idempotency_key(key))


_RESOLUTION = {cfg: re.compile(_schema(document(cfg), "/v1/videos", "post")["properties"]["resolution"]["pattern"])
               for cfg in (GatewayConfig(), replace(GatewayConfig(), resolution_multiple=16, min_side=32,
                                                    max_side=1000, max_pixels=300_000))}


@given(w=st.one_of(st.integers(1, 9999), st.integers(1, 250).map(lambda k: 8 * k)),
       h=st.one_of(st.integers(1, 9999), st.integers(1, 250).map(lambda k: 8 * k)),
       cfg=st.sampled_from(list(_RESOLUTION)))
def test_the_documented_resolution_pattern_is_the_gateways_rule(w, h, cfg):
    """Both ways: the pattern (sides, multiple, and the pixel cap, spelled out) accepts exactly what the
    gateway accepts, so schemathesis' positive and negative resolutions are answered as documented."""
    gateway = _accepted(lambda: normalize({"prompt": "x", "resolution": f"{w}x{h}"}, cfg))
    assert bool(_RESOLUTION[cfg].search(f"{w}x{h}")) == gateway, (w, h)


def test_the_resolution_pattern_at_the_edges():
    pattern = _RESOLUTION[GatewayConfig()]
    for ok in ("16x16", "1920x1080", "1080x1920", "1440x1440", "1088x1904", "32x24"):
        assert pattern.search(ok), ok
    for bad in ("1448x1440", "1920x1088", "8x16", "1928x16", "016x16", "24x24x24", "17x16"):
        assert not pattern.search(bad), bad


HOOK = "https://hooks.example.com/done"
# Values each optional field may take, null among them: the schema and normalize must agree on every mix.
_FIELD_VALUES = {
    "prompt": st.sampled_from(["a fox", " ", "\t\n", "x\x00", "", " \u00a0x", "\u2003"]),
    "run_at": st.sampled_from([None, 0, 5]), "delay_seconds": st.sampled_from([None, 0, 3]),
    "callback_url": st.sampled_from([None, HOOK]),
    "webhook_events": st.sampled_from([None, ["started"], []]),
    "dag_policy": st.sampled_from([None, "", "continue", "fail_fast"]),
    "parents": st.sampled_from([None, []]), "seed": st.sampled_from([None, 3]),
    "model": st.sampled_from([None, "m"]), "fps": st.sampled_from([None, 0, 8]),
    "negative_prompt": st.sampled_from([None, "", "blur", "a\x00"]),
    "timeout_seconds": st.sampled_from([None, 60]), "sampler": st.sampled_from([None, "ddim", ""]),
}


@given(body=st.fixed_dictionaries({"prompt": st.just("a fox")}, optional={
    "backoff_base_seconds": st.sampled_from([None, 0, 2, 300, 301, 86_400]),
    "backoff_max_seconds": st.sampled_from([None, 0, 1, 2, 300, 86_400])}))
def test_any_two_backoffs_within_their_limits_are_accepted_as_the_document_says(body):
    """The max caps the base (no comparison of two fields for JSON Schema to miss): the document and the
    gateway agree on every combination, and what is sent keeps base <= max."""
    assert _SUBMIT.is_valid(body) == _accepted(lambda: normalize(body, GatewayConfig())), body


@given(body=st.fixed_dictionaries({}, optional=_FIELD_VALUES))
def test_the_document_and_the_gateway_agree_on_nulls_and_field_combinations(body):
    """schemathesis' positive_data_acceptance and negative_data_rejection found these disagreements: null
    for an optional field (the gateway's default, the document's type error), `run_at` or `webhook_events`
    given as null beside the field they exclude or need, a blank prompt, NUL in a negative_prompt, and
    `dag_policy: ""` (read as the default although the enum refuses it)."""
    assert _SUBMIT.is_valid(body) == _accepted(lambda: normalize(body, GatewayConfig())), body


_SUBMIT = jsonschema_rs.validator_for(_schema(document(), "/v1/videos", "post"))


_REGISTRY = parse({"models": {
    "tiny-t2v": {"directory": "/m/tiny", "family": "unet3d", "dtype": "float32",
                 "sizes": {"multiple": 8, "min": 16, "max": 512}, "frames": {"min": 1, "max": 128},
                 "steps": {"min": 1, "max": 100}, "sampler": "ddim", "guidance_scale": 1.0, "pool": "any"},
    "wan": {"directory": "/m/wan", "family": "wan", "dtype": "bfloat16", "sizes": ["832x480", "480x832", "7x7"],
            "frames": {"min": 1, "max": 1000}, "steps": {"min": 30, "max": 50}, "sampler": "unipc",
            "guidance_scale": 5.0, "pool": "a100"},
    # A 4n+1 grid whose shortest video is longer than the gateway's default duration at the default 8 fps.
    "grid": {"directory": "/m/grid", "family": "wan", "dtype": "bfloat16", "sizes": ["256x256"],
             "frames": {"min": 17, "max": 81, "step": 4}, "steps": {"min": 1, "max": 100}, "sampler": "unipc",
             "guidance_scale": 5.0, "pool": "a100"}}})
_WITH_REGISTRY = replace(GatewayConfig(), models=_REGISTRY)
_SUBMIT_WITH_REGISTRY = jsonschema_rs.validator_for(_schema(document(_WITH_REGISTRY), "/v1/videos", "post"))


@given(body=st.fixed_dictionaries({"prompt": st.just("a fox")}, optional={
    "model": st.sampled_from([None, "tiny-t2v", "wan", "other"]),
    "resolution": st.sampled_from([None, "256x256", "512x512", "520x512", "832x480", "480x832", "7x7", "1920x1080"]),
    "num_steps": st.sampled_from([None, 1, 20, 30, 50, 100, 101]),
    "sampler": st.sampled_from([None, "ddim", "unipc", "flow_euler"])}))
def test_with_a_model_registry_the_document_states_each_models_rule(body):
    """The local stack's gateway has a registry: an unknown model, a size, step count or sampler the model
    does not take are 422, and the document says so per model (an anyOf branch each). The frame range
    (duration x fps) is not stated (see registry_rules): the duration is left at a value every model takes."""
    assert _SUBMIT_WITH_REGISTRY.is_valid(body) == _accepted(lambda: normalize(body, _WITH_REGISTRY)), body


def test_a_duration_between_two_frame_counts_renders_the_nearest():
    def frames(duration, fps):
        n = normalize({"prompt": "x", "model": "grid", "resolution": "256x256", "duration": duration, "fps": fps},
                      _WITH_REGISTRY)
        return round(n["duration"] * n["fps"]), n["duration"]

    assert frames(5, 16) == (81, 81 / 16)  # 80 frames asked: 81 on the 4n+1 grid
    assert frames(3, 16) == (49, 49 / 16)  # 48: 49 is nearer than 45
    assert frames(2.9375, 16) == (49, 49 / 16)  # 47: a tie between 45 and 49 goes to the longer
    assert frames(2.0625, 16) == (33, 2.0625)  # on the grid: the duration as given
    for duration, fps in ((5.1, 16), (1.0, 16), (0.5, 8)):
        with pytest.raises(ApiError) as refused:
            normalize({"prompt": "x", "model": "grid", "resolution": "256x256", "duration": duration, "fps": fps},
                      _WITH_REGISTRY)
        assert refused.value.field == "duration" and f"at {fps} fps" in refused.value.message


_CALLBACK = {private: jsonschema_rs.validator_for(_schema(document(GatewayConfig(), private), "/v1/videos", "post")
                                                  ["properties"]["callback_url"]) for private in (False, True)}
_HOSTS = st.sampled_from(["example.com", "hooks.example.com.", "a", "x-1.example", "EXAMPLE.COM", "localhost",
                          "LocalHost.", "api.localhost", "localhostx.io", "0", "127.0.0.1", "8.8.8.8", "0x7f.1",
                          "2130706433", "1.2.3.0xa", "[::1]", "[2001:db8::1]", "[1:2:3:4:5:6:7:8]", "[zz", "-a.com",
                          "a_b.com", "é.com", "user@example.com", ""])


@given(scheme=st.sampled_from(["http", "https", "HTTP", "ftp"]), host=_HOSTS,
       port=st.sampled_from(["", ":0", ":22", ":022", ":80", ":8443", ":65535", ":65536", ":", ":x"]),
       rest=st.sampled_from(["", "/", "/hook?a=1#f", "/a b", "/é", "?q", "\\\\x", "/" + "p" * 1990]),
       private=st.booleans())
def test_the_documented_callback_url_pattern_is_the_gateways_rule(scheme, host, port, rest, private):
    """callback_url: what the document's pattern and maxLength allow is exactly what submit accepts, with
    private addresses allowed or not (a reviewer's schemathesis run draws from the pattern: no 422 left)."""
    url = f"{scheme}://{host}{port}{rest}"
    gateway = _accepted(lambda: normalize({"prompt": "a fox", "callback_url": url}, GatewayConfig(),
                                          allow_private_callbacks=private))
    assert _CALLBACK[private].is_valid(url) == gateway, url


@given(st.data(), st.booleans())
def test_every_url_the_callback_pattern_generates_is_accepted(data, private):
    pattern = _schema(document(GatewayConfig(), private), "/v1/videos", "post")["properties"]["callback_url"]["pattern"]
    url = data.draw(st.from_regex(pattern, fullmatch=True).filter(lambda u: len(u) <= 2000))
    normalize({"prompt": "a fox", "callback_url": url}, GatewayConfig(), allow_private_callbacks=private)


def test_the_prompt_pattern_refuses_exactly_what_the_gateway_strips_away_in_any_regex_dialect():
    # \s means other characters to a JSON Schema (ECMA-262) validator than to Python's re: schemathesis
    # sent a prompt of U+001C, allowed by a pattern with \s, refused as blank by str.strip().
    import re

    from spotreel.services.gateway.openapi_bodies import PROMPT

    assert "\\s" not in PROMPT and "\\S" not in PROMPT
    pattern = re.compile(PROMPT)
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        ch = chr(code)
        assert bool(pattern.search(ch)) == (bool(ch.strip()) and ch != "\x00"), hex(code)


def test_the_repositorys_schemathesis_config_loads_and_names_documented_operations():
    """schemathesis.toml (read by a `schemathesis run` started in the repository) adds 422 to what
    positive_data_acceptance expects for the three operations whose rules JSON Schema cannot carry (a
    duration's frame range at the request's fps, DAG references, a cron that never fires), and only for
    operations the document has."""
    import tomllib
    from pathlib import Path

    from schemathesis.config import SchemathesisConfig

    path = Path(__file__).resolve().parents[2] / "schemathesis.toml"
    SchemathesisConfig.from_path(path)  # schemathesis' own validation of the file
    operations = tomllib.loads(path.read_text())["operations"]
    paths = document(_WITH_REGISTRY)["paths"]
    assert {(op["include-path"], op["include-method"]) for op in operations} == {
        ("/v1/videos", "POST"), ("/v1/dags", "POST"), ("/v1/schedules", "POST")}
    for op in operations:
        assert op["include-method"].lower() in paths[op["include-path"]]
        assert "422" in op["checks"]["positive_data_acceptance"]["expected-statuses"]


def test_the_openai_surface_is_documented_in_its_own_shapes():
    from spotreel.api import openai_videos as oa

    doc = document()
    create = doc["paths"]["/openai/v1/videos"]["post"]
    assert set(create["requestBody"]["content"]) == {"multipart/form-data", "application/json"}
    form = create["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert form["input_reference"]["format"] == "binary" and set(oa.EXTRA_FIELDS) <= set(form)
    video = oa.video_object(job_id="j" + "0" * 32, status="succeeded", model="m", prompt="p",
                            params={"duration_s": 1.0, "resolution": "32x32"}, created_at_ms=1_000,
                            updated_at_ms=2_000, progress_pct=100.0, idempotency_key="k", error=None,
                            terminal_reason=None, expires_at_ms=None)
    jsonschema_rs.validate(create["responses"]["200"]["content"]["application/json"]["schema"], video)
    _, error = oa.openai_error(ApiError(400, "invalid_image", "no", field="input_reference"))
    jsonschema_rs.validate(create["responses"]["400"]["content"]["application/json"]["schema"], error)
