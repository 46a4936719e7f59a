"""Image-to-video on the OpenAI-compatible surface, driven by the official `openai` SDK (async client, real
socket) against the gateway with in-memory fakes: `input_reference` as an upload or a data: URL is checked
(type by its bytes, size, pixels, decodable), stored once by its SHA-256 and carried by the SubmitJob as a
reference, never as bytes; a model without image conditioning, or one that needs an image, refuses with a
400 before anything is stored or sent."""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import replace

import aiohttp
import numpy as np
import openai
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from spotreel.api.config import GatewayConfig
from spotreel.codec import Codec
from spotreel.domain import commands as cmd
from spotreel.domain import images
from spotreel.domain.images import ImageRef
from spotreel.model_registry import parse
from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")]

REGISTRY = parse({"models": {
    "tiny-t2v": {"directory": "/m/tiny", "family": "unet3d", "sizes": {"multiple": 8, "min": 16, "max": 512},
                 "frames": {"min": 1, "max": 64}, "steps": {"min": 1, "max": 50}, "fps": 8},
    "tiny-i2v": {"directory": "/m/i2v", "family": "ltx", "sizes": {"multiple": 32, "min": 32, "max": 512},
                 "frames": {"min": 9, "max": 65, "step": 8}, "steps": {"min": 1, "max": 50}, "fps": 8,
                 "takes_image": True},
}})
I2V = {"model": "tiny-i2v", "seconds": "1.125", "size": "32x32"}


def image(fmt: str = "PNG", width: int = 40, height: int = 24, shade: int = 0) -> bytes:
    from PIL import Image

    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None, :]
    rgb[..., 2] = shade
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format=fmt)
    return out.getvalue()


PNG = image()


class MemoryImages:
    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.writes = 0

    async def put(self, ref: ImageRef, data: bytes) -> bool:
        if ref.key in self.objects:
            return False
        self.objects[ref.key] = (data, ref.media_type)
        self.writes += 1
        return True


@pytest_asyncio.fixture(loop_scope="function")
async def sdk():
    deps = fake_deps(images=MemoryImages())
    cfg = GatewayConfig(models=REGISTRY, max_image_bytes=64 * 1024, max_image_pixels=512 * 512, max_image_side=1024)
    server = TestServer(create_app(Settings(), deps, cfg))
    await server.start_server()
    client = openai.AsyncOpenAI(base_url=str(server.make_url("/openai/v1")), api_key="key-a", max_retries=0)
    yield client, deps, server
    await client.close()
    await server.close()


def submitted(deps) -> list[cmd.SubmitJob]:
    return [c for c in deps.commands.sent if isinstance(c, cmd.SubmitJob)]


async def test_an_uploaded_image_is_stored_once_and_the_job_carries_its_reference(sdk):
    client, deps, _ = sdk
    one = await client.videos.create(prompt="a red fox", **I2V, input_reference=("first.png", PNG, "image/png"))
    two = await client.videos.create(prompt="a blue fox", **I2V, input_reference=("again.png", PNG, "image/png"))
    assert one.id != two.id and one.model == "tiny-i2v"
    digest = hashlib.sha256(PNG).hexdigest()
    assert deps.images.objects == {f"inputs/sha256/{digest}": (PNG, "image/png")} and deps.images.writes == 1
    first, second = submitted(deps)
    ref = images.parse(first.spec.input_image)
    assert ref == ImageRef(f"inputs/sha256/{digest}", digest, "image/png")
    assert second.spec.input_image == first.spec.input_image
    # The record on the commands topic holds the reference, not the image.
    encoded = Codec.default().encode_message(first)
    assert PNG not in encoded and PNG[8:40] not in encoded and digest.encode() in encoded


async def post(server, body: dict | aiohttp.FormData) -> tuple[int, dict]:
    """A create request as JSON (a dict) or a form: the reference object's form the Python SDK cannot send."""
    async with aiohttp.ClientSession() as http:
        kw = {"json": body} if isinstance(body, dict) else {"data": body}
        r = await http.post(server.make_url("/openai/v1/videos"), headers={"Authorization": "Bearer key-a"}, **kw)
        return r.status, await r.json()


async def test_a_data_url_reference_is_taken_as_json_and_as_a_form_field(sdk):
    _, deps, server = sdk
    jpeg = image("JPEG", shade=90)
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    status, body = await post(server, {"prompt": "q", **I2V, "input_reference": {"image_url": url}})
    assert status == 200, body
    form = aiohttp.FormData({"prompt": "p", **I2V, "input_reference[image_url]": url})
    status, body = await post(server, form)
    assert status == 200, body
    refs = {images.parse(s.spec.input_image) for s in submitted(deps)}
    assert refs == {ImageRef.for_content(hashlib.sha256(jpeg).hexdigest(), "image/jpeg")}
    assert deps.images.writes == 1


async def test_the_same_key_with_another_image_is_another_request(sdk):
    client, _, _ = sdk
    key = {"Idempotency-Key": "img-1"}
    a = await client.videos.create(prompt="p", **I2V, input_reference=("a.png", PNG, "image/png"), extra_headers=key)
    again = await client.videos.create(prompt="p", **I2V, input_reference=("a.png", PNG, "image/png"),
                                       extra_headers=key)
    assert again.id == a.id
    with pytest.raises(openai.ConflictError):
        await client.videos.create(prompt="p", **I2V, input_reference=("b.png", image(shade=9), "image/png"),
                                   extra_headers=key)


async def test_a_remix_of_an_image_video_is_conditioned_on_the_same_image(sdk):
    client, deps, _ = sdk
    made = await client.videos.create(prompt="p", **I2V, input_reference=("a.png", PNG, "image/png"))
    remix = await client.videos.remix(made.id, prompt="the same at night")
    original, remixed = submitted(deps)
    assert remix.remixed_from_video_id == made.id
    assert remixed.spec.input_image == original.spec.input_image and remixed.spec.model == "tiny-i2v"


@pytest.mark.parametrize("given,code,words", [
    (("x.gif", b"GIF89a" + b"\0" * 40, "image/gif"), "unsupported_image_type", "PNG, JPEG or WebP"),
    (("x.png", PNG[:60], "image/png"), "invalid_image", "does not decode"),
    (("x.png", PNG[:8] + b"\0" * (64 * 1024), "image/png"), "image_too_large", "the limit is 65536"),
    (("x.png", image(width=1100, height=16), "image/png"), "image_too_large", "1024 per side"),
    (("x.png", image(width=600, height=600), "image/png"), "image_too_large", "262144 in all"),
    ({"file_id": "file-123"}, "unsupported_parameter", "no Files API"),
    ({"image_url": "https://example.com/a.png"}, "unsupported_parameter", "fetches no remote URLs"),
    ({"image_url": "data:image/png;base64,@@@"}, "invalid_image", "not valid base64"),
    ({"url": "x"}, "invalid_value", "image_url"),
])
async def test_a_bad_image_is_a_400_naming_input_reference(sdk, given, code, words):
    client, deps, server = sdk
    if isinstance(given, tuple):  # an upload, through the SDK
        with pytest.raises(openai.BadRequestError) as got:
            await client.videos.create(prompt="p", **I2V, input_reference=given)
        error = got.value.body
    else:  # a reference object, as JSON
        status, answer = await post(server, {"prompt": "p", **I2V, "input_reference": given})
        assert status == 400
        error = answer["error"]
    assert (error["param"], error["code"]) == ("input_reference", code)
    assert words in error["message"], error["message"]
    assert deps.images.objects == {} and submitted(deps) == []


async def test_models_refuse_an_image_they_cannot_use_or_the_lack_of_one(sdk):
    client, deps, _ = sdk
    with pytest.raises(openai.BadRequestError) as text_only:
        await client.videos.create(prompt="p", model="tiny-t2v", seconds="1", size="32x32",
                                   input_reference=("a.png", PNG, "image/png"))
    assert (text_only.value.param, text_only.value.code) == ("input_reference", "unsupported_parameter")
    assert "text-to-video only" in text_only.value.message and "tiny-i2v" in text_only.value.message
    with pytest.raises(openai.BadRequestError) as needs:
        await client.videos.create(prompt="p", **I2V)
    assert (needs.value.param, needs.value.code) == ("input_reference", "missing_required_parameter")
    assert deps.images.objects == {} and submitted(deps) == []


async def test_the_native_api_takes_no_image_and_refuses_an_image_model(sdk):
    _, deps, server = sdk
    async with aiohttp.ClientSession() as http:
        auth = {"Authorization": "Bearer key-a"}
        url = server.make_url("/v1/videos")
        r = await http.post(url, json={"prompt": "p", "model": "tiny-i2v", "resolution": "32x32", "duration": 1.125,
                                       "fps": 8}, headers=auth)
        body = await r.json()
        assert r.status == 422 and body["error"]["field"] == "input_image", body
        r = await http.post(url, json={"prompt": "p", "input_image": "{}"}, headers=auth)
        assert r.status == 422 and (await r.json())["error"]["field"] == "input_image"
    assert submitted(deps) == []


async def test_without_an_image_store_an_image_request_is_503():
    deps = fake_deps()
    server = TestServer(create_app(Settings(), deps, GatewayConfig(models=REGISTRY)))
    await server.start_server()
    client = openai.AsyncOpenAI(base_url=str(server.make_url("/openai/v1")), api_key="key-a", max_retries=0)
    try:
        with pytest.raises(openai.InternalServerError) as got:
            await client.videos.create(prompt="p", **I2V, input_reference=("a.png", PNG, "image/png"))
        assert got.value.status_code == 503
    finally:
        await client.close()
        await server.close()


def test_image_references_parse_strictly():
    digest = "ab" * 32
    ref = ImageRef.for_content(digest, "image/webp")
    assert images.parse(ref.text()) == ref and ref.key == f"inputs/sha256/{digest}"
    for text in ("", "[]", '{"key":"k","sha256":"x","media_type":"image/png"}',
                 replace(ref, key="elsewhere").text(), replace(ref, media_type="image/gif").text(),
                 replace(ref, sha256=digest.upper(), key=f"inputs/sha256/{digest.upper()}").text()):
        assert images.problem(text) is not None, text
    assert images.problem(None) is None


def test_the_registry_says_which_models_take_an_image():
    assert REGISTRY.image_models() == ["tiny-i2v"]
    assert REGISTRY.models["tiny-i2v"].as_dict()["takes_image"] is True
    with pytest.raises(ValueError, match="takes_image"):
        parse({"models": {"m": {"directory": "/m", "family": "ltx", "sizes": ["32x32"], "frames": {"max": 9},
                                "steps": {"max": 5}, "takes_image": "yes"}}})
