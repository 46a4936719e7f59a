"""The official `openai` SDK (sync and async), unchanged but for `base_url` and the API key, against a real
gateway, scheduler and projector (subprocesses of this worktree's code on the shared Kafka, Cassandra and
S3, a keyspace and prefix of their own) and a real `spotreel worker` rendering the tiny model: create and
poll, download an MP4 that decodes, its thumbnail and spritesheet, list pages, remix, delete, and each
error class the SDK raises for this surface's refusals; and the official Node package (tests/node) creates,
polls and downloads once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import uuid

import openai
import pytest
from cassandra.cluster import Cluster

from spotreel.platform.seed import local_registry_text
from spotreel.tenancy import create_tenant
from spotreel.media.video import decode_frames
from tests.integration.schedkit import ROOT
from tests.integration.workerkit import WorkerProc, start_plane

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")]

README = ROOT / "README.md"
# 0.5 s at the gateway's default 8 fps (the local registry names none): 4 frames of 32x32, 2 steps.
TINY = {"model": "tiny-t2v", "seconds": "0.5", "size": "32x32"}
FAST = {"num_steps": 2}


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openai-plane")
    registry = tmp / "models.toml"  # the local stack's registry, as README's lines meet it
    registry.write_text(local_registry_text(tmp))
    yield from start_plane(settings, stack, tmp, gateway_env={"SPOTREEL_MODEL_REGISTRY": str(registry)})


@pytest.fixture(scope="module")
def running(plane):
    """The projector (the read model the SDK polls) and one worker of the tiny model's pool."""
    log = open(plane.tmp / "projector.log", "ab")
    projector = subprocess.Popen([sys.executable, "-m", "spotreel.cli", "projector"], cwd=ROOT, env=plane.env(),
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    worker = WorkerProc(plane, "oa", "tiny-t2v", "http", (), gpu="any")
    try:
        worker.wait_ready()
        yield plane
    finally:
        worker.stop()
        os.killpg(projector.pid, signal.SIGTERM)
        projector.wait(30)
        log.close()


@pytest.fixture(scope="module")
def api_key(plane, stack):
    cluster = Cluster([stack.cassandra_host], port=stack.cassandra_port, protocol_version=5)
    session = cluster.connect(plane.settings.cassandra_keyspace)
    try:
        yield create_tenant(session, "sdk")
    finally:
        cluster.shutdown()


@pytest.fixture
def client(running, api_key):
    with openai.OpenAI(base_url=running.gateway_url + "/openai/v1", api_key=api_key, max_retries=0) as c:
        yield c


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


def test_create_poll_download_remix_delete(client):
    video = client.videos.create_and_poll(prompt="a red fox in snow", **TINY, extra_body={**FAST, "seed": 7},
                                          poll_interval_ms=200)
    assert video.status == "completed", video
    assert (video.progress, video.seconds, video.size, video.model) == (100, "0.5", "32x32", "tiny-t2v")
    assert video.completed_at is not None and video.completed_at >= video.created_at
    frames = decode_frames(client.videos.download_content(video.id).read())
    assert frames.shape == (4, 32, 32, 3)
    assert png_size(client.videos.download_content(video.id, variant="thumbnail").read()) == (32, 32)
    assert png_size(client.videos.download_content(video.id, variant="spritesheet").read()) == (64, 64)

    remix = client.videos.remix(video.id, prompt="a red fox at night")
    assert remix.remixed_from_video_id == video.id
    done = client.videos.poll(remix.id, poll_interval_ms=200)
    assert done.status == "completed" and (done.seconds, done.size) == ("0.5", "32x32")
    assert decode_frames(client.videos.download_content(remix.id).read()).shape == (4, 32, 32, 3)

    listed = [v.id for v in client.videos.list(limit=1)]  # one per page: the SDK follows last_id
    assert listed[:2] == [remix.id, video.id]
    assert [v.id for v in client.videos.list(order="asc", limit=1)][-2:] == [video.id, remix.id]

    gone = client.videos.delete(remix.id)
    assert gone.deleted and gone.object == "video.deleted"
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(remix.id)
    assert remix.id not in [v.id for v in client.videos.list()]


def test_the_async_client_renders_too(running, api_key):
    async def go():
        async with openai.AsyncOpenAI(base_url=running.gateway_url + "/openai/v1", api_key=api_key,
                                      max_retries=0) as c:
            video = await c.videos.create_and_poll(prompt="a blue boat", **TINY, extra_body=FAST, poll_interval_ms=200)
            assert video.status == "completed", video
            return (await c.videos.download_content(video.id)).read()

    assert decode_frames(asyncio.run(go())).shape == (4, 32, 32, 3)


def test_each_refusal_is_the_sdks_exception_class(client, running):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.videos.create(prompt="p", model="sora-2")
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.videos.create(prompt="p", model="tiny-t2v", seconds="soon")
    assert bad.value.param == "seconds" and bad.value.type == "invalid_request_error"
    with pytest.raises(openai.UnprocessableEntityError) as big:
        client.videos.create(prompt="p", model="tiny-t2v", size="520x520")
    assert big.value.param == "size" and "multiple of 8 from 16 to 512" in big.value.message
    with pytest.raises(openai.UnprocessableEntityError) as long:
        client.videos.create(prompt="p", model="tiny-t2v", seconds="20", size="32x32")
    assert long.value.param == "seconds" and "seconds from 0.125 to 16" in long.value.message
    key = {"Idempotency-Key": f"sdk-{uuid.uuid4().hex}"}
    first = client.videos.create(prompt="p", **TINY, extra_body={**FAST, "delay_seconds": 3600}, extra_headers=key)
    again = client.videos.create(prompt="p", **TINY, extra_body={**FAST, "delay_seconds": 3600}, extra_headers=key)
    assert again.id == first.id and first.status == "queued"
    with pytest.raises(openai.ConflictError) as reused:
        client.videos.create(prompt="other", **TINY, extra_headers=key)
    assert reused.value.code == "idempotency_key_reused"
    with pytest.raises(openai.ConflictError):
        client.videos.download_content(first.id)  # not rendered yet
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve("j" + "0" * 32)
    with openai.OpenAI(base_url=running.gateway_url + "/openai/v1", api_key="sr_wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError):
            stranger.videos.list()


def test_readmes_three_lines(running, api_key, tmp_path):
    """README's "Using it from the openai SDK" block, run as written but for the gateway's address and key."""
    block = re.search(r"## Using it from the openai SDK\n.*?```python\n(.*?)```", README.read_text(), re.S)[1]
    assert len(block.strip().splitlines()) == 3
    code = block.replace("http://127.0.0.1:18700", running.gateway_url).replace("sr_dev_local_key_not_secret",
                                                                                 api_key)
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], cwd=tmp_path, check=True,
                   timeout=150)
    assert decode_frames((tmp_path / "fox.mp4").read_bytes()).shape == (8, 64, 64, 3)


NODE_DIR = ROOT / "tests" / "node"


def node_sdk() -> str:
    """The `node` binary, with tests/node's pinned `openai` package installed (`make test` runs `npm ci`
    there; a checkout without it installs here, from package-lock.json)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed (tools/system-packages installs nodejs and npm)"
    if not (NODE_DIR / "node_modules" / "openai" / "package.json").is_file():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=180)
    return node


def test_the_node_sdk_creates_polls_and_downloads(running, api_key, tmp_path):
    node = node_sdk()
    out = tmp_path / "node.mp4"
    done = subprocess.run([node, str(NODE_DIR / "openai_sdk_smoke.mjs"), running.gateway_url + "/openai/v1", api_key,
                           "tiny-t2v", str(out)], cwd=NODE_DIR, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["openai"]
    assert json.loads((NODE_DIR / "node_modules" / "openai" / "package.json").read_text())["version"] == pinned
    assert (said["created"], said["status"], said["seconds"], said["size"]) == ("queued", "completed", "0.5", "32x32")
    assert said["listed"] == [said["id"]] and said["bytes"] == out.stat().st_size
    assert decode_frames(out.read_bytes()).shape == (4, 32, 32, 3)
