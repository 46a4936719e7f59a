"""The OpenAI-compatible surface (/openai/v1) driven by the official `openai` SDK (its async client, over a real
socket) against the gateway with in-memory fakes: what the SDK sends is accepted, what it reads parses, and
each error arrives as the SDK's exception class."""

from __future__ import annotations

import openai
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from spotreel.api.config import GatewayConfig
from spotreel.domain import commands as cmd
from spotreel.model_registry import parse
from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, with_status

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")

REGISTRY = parse({"models": {
    "tiny-t2v": {"directory": "/m/tiny", "family": "unet3d", "sizes": {"multiple": 8, "min": 16, "max": 512},
                 "frames": {"min": 1, "max": 64}, "steps": {"min": 1, "max": 50}, "fps": 8},
    "wan2.1-t2v": {"directory": "/m/wan", "family": "wan", "sizes": ["832x480", "480x832"],
                   "frames": {"min": 5, "max": 81, "step": 4}, "steps": {"min": 1, "max": 50}, "fps": 16},
}})


@pytest_asyncio.fixture(loop_scope="function")
async def sdk():
    deps = fake_deps()
    server = TestServer(create_app(Settings(), deps, GatewayConfig(models=REGISTRY)))
    await server.start_server()
    client = openai.AsyncOpenAI(base_url=str(server.make_url("/openai/v1")), api_key="key-a", max_retries=0)
    yield client, deps, server
    await client.close()
    await server.close()


def submitted(deps) -> list[cmd.SubmitJob]:
    return [c for c in deps.commands.sent if isinstance(c, cmd.SubmitJob)]


async def test_create_sends_a_form_that_becomes_the_native_submission(sdk):
    client, deps, _ = sdk
    video = await client.videos.create(prompt="a red fox in snow", model="wan2.1-t2v", seconds="4", size="832x480",
                                       extra_body={"priority": 3, "seed": 11, "num_steps": 4})
    assert video.object == "video" and video.status == "queued" and video.progress == 0
    assert video.model == "wan2.1-t2v" and video.seconds == "4.0625" and video.size == "832x480"
    [submit] = submitted(deps)
    assert submit.job_id == video.id and submit.priority == 3
    # 4 s at the model's 16 fps is 64 frames, off its 4n+1 grid: the nearest count on it, 65.
    assert (submit.spec.fps, submit.spec.resolution, submit.spec.seed, submit.spec.num_steps) == (16, "832x480", 11, 4)
    assert round(submit.spec.duration_s * submit.spec.fps) == 65


async def test_the_idempotency_key_header_makes_a_retry_the_same_video(sdk):
    client, deps, _ = sdk
    one = await client.videos.create(prompt="p", seconds="1", size="32x32", extra_headers={"Idempotency-Key": "k-1"})
    two = await client.videos.create(prompt="p", seconds="1", size="32x32", extra_headers={"Idempotency-Key": "k-1"})
    assert one.id == two.id
    with pytest.raises(openai.ConflictError) as got:
        await client.videos.create(prompt="other", seconds="1", size="32x32", extra_headers={"Idempotency-Key": "k-1"})
    assert got.value.code == "idempotency_key_reused" and got.value.type == "invalid_request_error"


async def test_retrieve_maps_statuses_progress_and_times(sdk):
    client, deps, _ = sdk
    made = await client.videos.create(prompt="p", seconds="1", size="32x32")
    with_status(deps, made.id, "running", progress_pct=42.7, created_at_ms=1_700_000_000_123,
                params={"duration_s": 1.0, "resolution": "32x32", "fps": 8})
    got = await client.videos.retrieve(made.id)
    assert (got.status, got.progress, got.created_at, got.seconds) == ("in_progress", 42, 1_700_000_000, "1")
    with_status(deps, made.id, "failed", error="CUDA out of memory", terminal_reason="max_attempts",
                updated_at_ms=1_700_000_050_000)
    got = await client.videos.retrieve(made.id)
    assert got.status == "failed" and got.completed_at == 1_700_000_050
    assert got.error is not None and got.error.code == "max_attempts" and "memory" in got.error.message


async def test_list_pages_by_cursor_in_both_orders(sdk):
    client, deps, _ = sdk
    ids = []
    for i in range(5):
        v = await client.videos.create(prompt=f"p{i}", seconds="1", size="32x32")
        with_status(deps, v.id, "queued", created_at_ms=1_700_000_000_000 + i * 1000,
                    params={"duration_s": 1.0, "resolution": "32x32"})
        ids.append(v.id)
    page = await client.videos.list(limit=2)
    assert [v.id for v in page.data] == ids[::-1][:2] and page.has_more
    everything = [v.id async for v in client.videos.list(limit=2)]
    assert everything == ids[::-1]
    assert [v.id async for v in client.videos.list(limit=3, order="asc")] == ids


async def test_remix_takes_the_earlier_settings_and_a_new_prompt(sdk):
    client, deps, _ = sdk
    first = await client.videos.create(prompt="a fox", model="wan2.1-t2v", seconds="1", size="480x832",
                                       extra_body={"seed": 5})
    remix = await client.videos.remix(first.id, prompt="a fox at night")
    assert remix.remixed_from_video_id == first.id and remix.id != first.id
    a, b = submitted(deps)
    assert b.spec.prompt == "a fox at night"
    assert (b.spec.model, b.spec.resolution, b.spec.seed, b.spec.duration_s) == \
        (a.spec.model, a.spec.resolution, a.spec.seed, a.spec.duration_s)


async def test_delete_cancels_and_hides_the_video(sdk):
    client, deps, _ = sdk
    v = await client.videos.create(prompt="p", seconds="1", size="32x32")
    with_status(deps, v.id, "running")
    gone = await client.videos.delete(v.id)
    assert gone.deleted and gone.object == "video.deleted" and gone.id == v.id
    # The native erasure: EraseJob, which the scheduler turns into a cancel of the running job first.
    assert any(isinstance(c, cmd.EraseJob) and c.job_id == v.id and c.by.startswith("tenant:")
               for c in deps.commands.sent)
    with pytest.raises(openai.NotFoundError):
        await client.videos.retrieve(v.id)


async def test_each_refusal_is_the_sdks_exception_class(sdk):
    client, deps, server = sdk
    with pytest.raises(openai.NotFoundError) as got:
        await client.videos.create(prompt="p", model="sora-2")
    assert got.value.code == "model_not_found" and got.value.param == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.videos.create(prompt="p", seconds="four")
    assert bad.value.param == "seconds"
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await client.videos.create(prompt="p", model="wan2.1-t2v", size="640x640")
    assert refused.value.param == "size" and "832x480" in refused.value.message
    with pytest.raises(openai.UnprocessableEntityError) as long:
        await client.videos.create(prompt="p", model="wan2.1-t2v", seconds="12")
    assert long.value.param == "seconds"
    with pytest.raises(openai.BadRequestError):
        await client.videos.create(prompt="p", extra_body={"priority": "high"})
    with pytest.raises(openai.NotFoundError):
        await client.videos.retrieve("j" + "0" * 32)
    v = await client.videos.create(prompt="p", seconds="1", size="32x32")
    with pytest.raises(openai.ConflictError):
        await client.videos.download_content(v.id)
    stranger = openai.AsyncOpenAI(base_url=str(server.make_url("/openai/v1")), api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as unauth:
        await stranger.videos.list()
    assert unauth.value.type == "authentication_error"
    await stranger.close()


async def test_a_rate_limited_create_is_429_with_retry_after():
    deps = fake_deps()
    server = TestServer(create_app(Settings(), deps, GatewayConfig(models=REGISTRY, default_burst=1,
                                                                   default_rate_per_minute=1)))
    await server.start_server()
    client = openai.AsyncOpenAI(base_url=str(server.make_url("/openai/v1")), api_key="key-a", max_retries=0)
    try:
        await client.videos.create(prompt="p", seconds="1", size="32x32")
        with pytest.raises(openai.RateLimitError) as got:
            await client.videos.create(prompt="q", seconds="1", size="32x32")
        assert int(got.value.response.headers["Retry-After"]) >= 1
        assert got.value.type == "rate_limit_error"
    finally:
        await client.close()
        await server.close()


async def test_json_bodies_are_taken_too(sdk):
    client, deps, server = sdk
    import aiohttp

    async with aiohttp.ClientSession() as http:
        r = await http.post(server.make_url("/openai/v1/videos"), json={"prompt": "p", "seconds": "1", "size": "32x32",
                                                                        "seed": 3},
                            headers={"Authorization": "Bearer key-a"})
        body = await r.json()
    assert r.status == 200 and body["object"] == "video"
    assert submitted(deps)[0].spec.seed == 3
