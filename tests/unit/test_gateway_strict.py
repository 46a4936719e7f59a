"""The public API's stricter edges (issue 13, item 5): lone surrogates, media types, 405 with Allow, oversized
headers, resolution and callback_url rules. Each answer is the JSON error shape, naming the field."""

from __future__ import annotations

from contextlib import AsyncExitStack

import json
from dataclasses import replace

import pytest
import pytest_asyncio

from spotreel.domain import commands as cmd
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.public.guards import MAX_HEADER_BYTES, MAX_TARGET_BYTES
from spotreel.services.gateway.openapi import document
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, serving, with_status

A = {"Authorization": "Bearer key-a"}
JSON = {**A, "Content-Type": "application/json"}


@pytest_asyncio.fixture(loop_scope="function")
async def api():
    async with AsyncExitStack() as served:
        async def make(settings: Settings | None = None, cfg: GatewayConfig | None = None):
            deps = fake_deps()
            return await served.enter_async_context(serving(deps, cfg, settings)), deps

        yield make


async def error_of(r, status: int) -> dict:
    assert r.status == status, (r.status, await r.text())
    assert r.headers["Content-Type"].startswith("application/json")
    return (await r.json())["error"]


# -- 1. lone surrogates ------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,field", [
    (b'{"prompt": "\\ud800"}', "prompt"),
    (b'{"prompt": "fox", "callback_url": "https://hooks.example.com/\\udfff"}', "callback_url"),
    (b'{"prompt": "fox \\udc00 in snow", "seed": 1}', "prompt"),
    (b'{"prompt": "fox", "model": "tiny\\ud83d"}', "model"),
    (b'{"prompt": "fox", "\\ud800": 1}', "\\ud800"),
])
async def test_lone_surrogate_is_422_naming_the_field(api, raw, field):
    client, deps = await api()
    err = await error_of(await client.post("/v1/videos", data=raw, headers=JSON), 422)
    assert err["field"] == field and "surrogate" in err["message"]
    assert deps.commands.sent == [] and deps.reads.claims == {}


async def test_surrogate_pairs_are_text(api):
    client, deps = await api()
    r = await client.post("/v1/videos", data=b'{"prompt": "fox \\ud83e\\udd8a"}', headers=JSON)
    assert r.status == 202 and deps.commands.sent[0].spec.prompt == "fox \U0001f98a"


async def test_lone_surrogate_in_a_dag_node_and_a_patch(api):
    client, deps = await api()
    dag = b'{"nodes": [{"key": "a", "prompt": "x"}, {"key": "b", "prompt": "\\ud800", "parents": ["a"]}]}'
    err = await error_of(await client.post("/v1/dags", data=dag, headers=JSON), 422)
    assert err["field"] == "nodes[1].prompt"
    job_id = (await (await client.post("/v1/videos", json={"prompt": "x"}, headers=A)).json())["job_id"]
    with_status(deps, job_id, "queued")
    err = await error_of(await client.patch(f"/v1/videos/{job_id}", data=b'{"\\ud800": 1}', headers=JSON), 422)
    assert err["field"] == "\\ud800"


async def test_json_nested_past_the_parsers_stack_is_400_not_500(api):
    client, _ = await api()
    err = await error_of(await client.post("/v1/videos", data=b"[" * 20_000, headers=JSON), 400)
    assert err["code"] == "invalid_json"


# -- 2. media types ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", "application/jsonx"])
@pytest.mark.parametrize("method,path", [("POST", "/v1/videos"), ("POST", "/v1/dags"), ("PATCH", "/v1/videos/{id}"),
                                         ("POST", "/v1/videos/{id}/pause")])
async def test_a_body_that_is_not_json_is_415(api, content_type, method, path):
    client, deps = await api()
    job_id = (await (await client.post("/v1/videos", json={"prompt": "x"}, headers=A)).json())["job_id"]
    with_status(deps, job_id, "queued")
    sent = len(deps.commands.sent)
    headers = dict(A) | ({"Content-Type": content_type} if content_type else {})
    body = json.dumps({"prompt": "x", "priority": 1, "nodes": [{"key": "a", "prompt": "x"}]}).encode()
    # aiohttp adds application/octet-stream to a bytes body unless told to skip it.
    r = await client.request(method, path.format(id=job_id), data=body, headers=headers,
                             skip_auto_headers=["Content-Type"])
    err = await error_of(r, 415)
    assert err["code"] == "unsupported_media_type" and err["field"] == "Content-Type"
    assert len(deps.commands.sent) == sent


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON; charset=UTF-8", "application/vnd.spotreel+json"])
async def test_json_media_types_are_accepted(api, content_type):
    client, _ = await api()
    r = await client.post("/v1/videos", data=b'{"prompt": "x"}', headers={**A, "Content-Type": content_type})
    assert r.status == 202


async def test_requests_without_a_body_need_no_content_type(api):
    client, deps = await api()
    job_id = (await (await client.post("/v1/videos", json={"prompt": "x"}, headers=A)).json())["job_id"]
    with_status(deps, job_id, "queued")
    assert (await client.post(f"/v1/videos/{job_id}/pause", headers=A)).status == 202
    assert (await client.post(f"/v1/videos/{job_id}/cancel", headers=A)).status == 202


async def test_auth_and_routing_answer_before_the_media_type(api):
    client, _ = await api()
    text = {"Content-Type": "text/plain"}
    assert (await client.post("/v1/videos", data=b"x", headers=text)).status == 401
    assert (await client.post("/v1/nothing", data=b"x", headers={**A, **text})).status == 404
    assert (await client.put("/v1/videos", data=b"x", headers={**A, **text})).status == 405


# -- 3. 405 with Allow -------------------------------------------------------------------------------------

async def test_every_documented_path_answers_405_with_the_documented_methods(api):
    client, _ = await api()
    worker = {"Authorization": "Bearer worker-key"}
    for path, ops in document()["paths"].items():
        documented = {m.upper() for m in ops}
        url = path.replace("{id}", "j" + "0" * 32).replace("{job_id}", "j" + "0" * 32)
        for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - documented):
            r = await client.request(method, url, headers=worker if path.startswith("/internal/") else A)
            err = await error_of(r, 405)
            allowed = {m.strip() for m in r.headers["Allow"].split(",")}
            assert allowed - {"HEAD"} == documented, (method, path, r.headers["Allow"])
            assert err["code"] == "method_not_allowed"
            # The OpenAI-compatible surface answers in OpenAI's error shape, which has no `allowed` list.
            assert path.startswith("/openai/") or set(err["allowed"]) == allowed


async def test_delete_of_the_collection_is_refused_and_changes_nothing(api):
    client, deps = await api()
    await client.post("/v1/videos", json={"prompt": "x"}, headers=A)
    sent = len(deps.commands.sent)
    err = await error_of(await client.delete("/v1/videos", headers=A), 405)
    assert set(err["allowed"]) == {"GET", "POST"} and len(deps.commands.sent) == sent


# -- 4. header and request-target sizes --------------------------------------------------------------------

async def test_a_header_over_the_limit_is_a_json_431_naming_it(api):
    client, deps = await api()
    over = "a" * (MAX_HEADER_BYTES - len("X-Trace") + 1)
    err = await error_of(await client.post("/v1/videos", json={"prompt": "x"}, headers={**A, "X-Trace": over}),
                         431)
    assert err["code"] == "header_too_large" and err["field"] == "X-Trace"
    huge_key = {"Authorization": "Bearer " + "k" * MAX_HEADER_BYTES}
    err = await error_of(await client.get("/v1/videos", headers=huge_key), 431)
    assert err["field"] == "Authorization" and deps.auth.lookups == 0
    at_limit = "a" * (MAX_HEADER_BYTES - len("X-Trace"))
    assert (await client.get("/v1/videos", headers={**A, "X-Trace": at_limit})).status == 200


async def test_a_request_target_over_the_limit_is_a_json_414(api):
    client, _ = await api()
    err = await error_of(await client.get("/v1/videos?page_token=" + "t" * MAX_TARGET_BYTES, headers=A), 414)
    assert err["code"] == "uri_too_long"


# -- 5. resolution and the other numbers -------------------------------------------------------------------

@pytest.mark.parametrize("resolution", ["10x10", "9999x9999", "0x0", "axb", "32x", "32X32", "33x32", "32x36",
                                        "8x8", "1928x1080", "1920x1920", "032x32", "32x32\n", " 32x32", 32])
async def test_resolutions_workers_cannot_render_are_refused_with_the_rule(api, resolution):
    client, deps = await api()
    r = await client.post("/v1/videos", json={"prompt": "x", "resolution": resolution}, headers=A)
    err = await error_of(r, 422)
    assert err["field"] == "resolution"
    if isinstance(resolution, str):
        assert "multiple of 8" in err["message"] and "16" in err["message"] and "1920" in err["message"]
    assert deps.commands.sent == []


@pytest.mark.parametrize("resolution", ["32x32", "32x24", "16x16", "256x256", "1920x1080", "1080x1920", "512x320"])
async def test_renderable_resolutions_are_accepted(api, resolution):
    client, deps = await api()
    r = await client.post("/v1/videos", json={"prompt": "x", "resolution": resolution}, headers=A)
    assert r.status == 202 and deps.commands.sent[0].spec.resolution == resolution


@pytest.mark.parametrize("field,value", [("fps", 61), ("fps", 0), ("num_steps", 501), ("num_steps", 0),
                                         ("duration", 60.5), ("duration", 0), ("priority", -1), ("seed", -1),
                                         ("delay_seconds", -1), ("run_at", 2**53 + 1), ("model", "tiny\n"),
                                         ("parents", ["j" + "0" * 32 + "\n"])])
async def test_number_and_name_bounds(api, field, value):
    client, _ = await api()
    err = await error_of(await client.post("/v1/videos", json={"prompt": "x", field: value}, headers=A), 422)
    assert err["field"] == field


async def test_null_optional_fields_take_their_defaults(api):
    client, deps = await api()
    nulls = {f: None for f in ("duration", "parents", "resolution", "fps", "num_steps", "model", "dag_policy")}
    assert (await client.post("/v1/videos", json={"prompt": "x", **nulls}, headers=A)).status == 202
    sent = deps.commands.sent[0]
    assert (sent.spec.duration_s, sent.spec.resolution, sent.parents) == (2.0, "256x256", ())


async def test_limits_follow_the_config(api):
    client, _ = await api(cfg=replace(GatewayConfig(), max_side=64, max_pixels=64 * 32))
    assert (await client.post("/v1/videos", json={"prompt": "x", "resolution": "64x32"}, headers=A)).status == 202
    r = await client.post("/v1/videos", json={"prompt": "x", "resolution": "64x64"}, headers=A)
    assert "at most 2048 pixels" in (await error_of(r, 422))["message"]


# -- 6. callback_url ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("url,why", [
    ("http://169.254.169.254/latest/meta-data", "link-local"), ("http://10.1.2.3/hook", "private"),
    ("http://172.16.0.9/hook", "private"), ("http://192.168.1.1/hook", "private"),
    ("http://127.0.0.1:9000/hook", "loopback"), ("http://localhost:9000/hook", "loopback"),
    ("http://[::1]/hook", "loopback"), ("http://2130706433/hook", "loopback"),
    ("http://[::ffff:10.0.0.1]/hook", "private"), ("https://hooks.example.com:22/hook", "port 22"),
    ("ftp://hooks.example.com/hook", "http(s)"), ("https://hooks.example.com:99999/", "port"),
    ("http://[abc/hook", "valid URL"), ("https:///hook", "host"),
])
async def test_undeliverable_callbacks_are_refused_at_submit(api, url, why):
    client, deps = await api()
    err = await error_of(await client.post("/v1/videos", json={"prompt": "x", "callback_url": url}, headers=A), 422)
    assert err["field"] == "callback_url" and why in err["message"]
    assert deps.commands.sent == []


async def test_a_dag_node_callback_is_judged_the_same(api):
    client, _ = await api()
    dag = {"nodes": [{"key": "a", "prompt": "x", "callback_url": "http://10.0.0.1/h"}]}
    err = await error_of(await client.post("/v1/dags", json=dag, headers=A), 422)
    assert err["field"] == "nodes[0].callback_url"


@pytest.mark.parametrize("parents", [{}, "", 0, False, "a"])
async def test_a_dag_nodes_parents_that_are_no_list_are_refused_even_when_falsy(api, parents):
    client, deps = await api()
    dag = {"nodes": [{"key": "a", "prompt": "x", "parents": parents}]}
    err = await error_of(await client.post("/v1/dags", json=dag, headers=A), 422)
    assert err["field"] == "nodes[0].parents" and deps.commands.sent == []


async def test_callbacks_follow_the_webhook_senders_private_address_setting(api):
    """Loopback receivers are deliverable where the deployment lets the sender reach them (the local stack's
    tests); port 22 and other schemes never are."""
    dev, deps = await api(settings=replace(Settings(), webhook_allow_private=1))
    for i, url in enumerate(["http://127.0.0.1:9000/hook", "http://localhost:9000/hook", "http://10.0.0.1/h"]):
        r = await dev.post("/v1/videos", json={"prompt": "x", "callback_url": url},
                           headers={**A, "Idempotency-Key": f"k{i}"})
        assert r.status == 202, url
    assert isinstance(deps.commands.sent[0], cmd.SubmitJob)
    assert deps.commands.sent[0].callback_url == "http://127.0.0.1:9000/hook"
    r = await dev.post("/v1/videos", json={"prompt": "x", "callback_url": "http://127.0.0.1:22/"}, headers=A)
    assert (await error_of(r, 422))["field"] == "callback_url"


async def test_public_callbacks_pass(api):
    client, deps = await api()
    for i, url in enumerate(["https://hooks.example.com/spotreel?x=1", "http://hooks.example:8080/h#f"]):
        r = await client.post("/v1/videos", json={"prompt": "x", "callback_url": url},
                              headers={**A, "Idempotency-Key": f"k{i}"})
        assert r.status == 202, url


async def test_ip_literal_callbacks_are_refused_where_private_addresses_are_not_allowed(api):
    """Even a global one: the documented pattern takes DNS names only there, and the gateway asks what the
    document says (telling a global address from the rest in every inet_aton spelling is no pattern's job)."""
    client, deps = await api()
    r = await client.post("/v1/videos", json={"prompt": "x", "callback_url": "http://93.184.215.14:8080/h"},
                          headers=A)
    err = await error_of(r, 422)
    assert err["field"] == "callback_url" and "IP literals are refused" in err["message"]


# -- 7. whole numbers written as floats ----------------------------------------------------------------------

async def test_a_whole_number_written_as_a_float_is_an_integer(api):
    """JSON Schema counts 9.0 as an integer; the document says integer, so the gateway takes it (as 9)."""
    client, deps = await api()
    r = await client.post("/v1/videos", data=b'{"prompt": "x", "fps": 8.0, "priority": 2e0}', headers=JSON)
    assert r.status == 202, await r.text()
    submit = deps.commands.sent[-1]
    assert (submit.spec.fps, submit.priority) == (8, 2)
    r2 = await client.post("/v1/videos", data=b'{"prompt": "x", "fps": 8, "priority": 2}',
                           headers={**JSON, "Idempotency-Key": r.headers["Idempotency-Key"]})
    assert (await r2.json())["replayed"] is True  # the same request, the same hash
    job = submit.job_id
    with_status(deps, job, "queued")
    r = await client.patch(f"/v1/videos/{job}", data=b'{"priority": 9.0}', headers=JSON)
    assert r.status == 202, await r.text()
    r = await client.post("/v1/videos", data=b'{"prompt": "x", "fps": 8.5}', headers=JSON)
    assert (await error_of(r, 422))["field"] == "fps"
