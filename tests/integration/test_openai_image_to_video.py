"""Image-to-video through the official `openai` SDK, unchanged but for `base_url` and the API key, against a
real gateway, scheduler and projector (subprocesses of this worktree's code on the shared Kafka, Cassandra and
S3, with a topic prefix, keyspace and buckets of their own) and real `spotreel worker`s rendering the tiny
LTX-Video image-to-video model (LTXImageToVideoPipeline, random weights, built here): the SDK uploads the
image as `input_reference`, the MP4 decodes, two jobs of one image share one S3 object under its SHA-256, no
record on the topics holds the image's bytes, and a worker killed with kill -9 mid-render is resumed by
another to the very frames of an uninterrupted render of the same image."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import replace

import numpy as np
import openai
import pytest
from cassandra.cluster import Cluster
from confluent_kafka import Consumer, TopicPartition

from spotreel.adapters.kafka import assignments_topic
from spotreel.domain import events as ev
from spotreel.domain import images
from spotreel.platform.topics import commands_topic, events_topic
from spotreel.tenancy import create_tenant
from spotreel.media.video import decode_frames, frames_checksum
from tests.integration.personalkit import plain
from tests.integration.schedkit import ROOT
from tests.integration.workerkit import WorkerProc, events_of, start_plane, video_frames_checksum, wait_done

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")]

MODEL, CHAOS_MODEL = "tiny-i2v", "tiny-i2v-resume"
# 9 frames of 32x32 at 8 fps (the tiny LTX VAE's 8n+1 frames, sides multiples of 32).
VIDEO = {"seconds": "1.125", "size": "32x32"}


def noise_png(seed: int, width: int = 48, height: int = 40) -> bytes:
    """Random pixels: a PNG whose bytes are unlike anything else on the topics."""
    from PIL import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG")
    return out.getvalue()


IMAGE = noise_png(1)


def registry_text(model_dir) -> str:
    entry = (f'directory = "{model_dir}"\nfamily = "ltx"\ndtype = "float32"\n'
             "sizes = { multiple = 32, min = 32, max = 64 }\nframes = { min = 9, max = 17, step = 8 }\n"
             'steps = { min = 1, max = 50 }\nsampler = "flow_euler"\nfps = 8\ntakes_image = true\npool = "any"\n')
    text_only = ('[models.tiny-t2v]\ndirectory = "/nowhere"\nfamily = "unet3d"\n'
                 "sizes = { multiple = 8, min = 16, max = 512 }\nframes = { min = 1, max = 128 }\n"
                 "steps = { min = 1, max = 100 }\n")
    return f"[models.{MODEL}]\n{entry}\n[models.{CHAOS_MODEL}]\n{entry}\n{text_only}"


@pytest.fixture(scope="module")
def i2v_dir(settings):
    from spotreel.worker.model_tiny import ensure_tiny_model

    return ensure_tiny_model(settings.cache_dir, family="ltx-i2v")


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory, i2v_dir):
    tmp = tmp_path_factory.mktemp("i2v-plane")
    registry = tmp / "models.toml"
    registry.write_text(registry_text(i2v_dir))
    for p in start_plane(settings, stack, tmp, gateway_env={"SPOTREEL_MODEL_REGISTRY": str(registry)}):
        yield replace(p, model_dir=i2v_dir)  # the plane's workers load the image-to-video model


@pytest.fixture(scope="module")
def projector(plane):
    log = open(plane.tmp / "projector.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "spotreel.cli", "projector"], cwd=ROOT, env=plane.env(),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()


@pytest.fixture(scope="module")
def client(plane, stack, projector):
    cluster = Cluster([stack.cassandra_host], port=stack.cassandra_port, protocol_version=5)
    try:
        key = create_tenant(cluster.connect(plane.settings.cassandra_keyspace), "sdk-i2v")
    finally:
        cluster.shutdown()
    with openai.OpenAI(base_url=plane.gateway_url + "/openai/v1", api_key=key, max_retries=0) as c:
        yield c


def topic_values(plane, topic: str) -> list[bytes]:
    """Every record value on `topic` so far (all partitions, up to their high watermarks)."""
    cons = Consumer({"bootstrap.servers": plane.settings.kafka_bootstrap, "group.id": f"raw-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    try:
        ends = {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(plane.settings.partitions)}
        cons.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        seen = {p: 0 for p in ends}
        values: list[bytes] = []
        while any(seen[p] < end for p, end in ends.items()):
            for msg in cons.consume(500, 2.0):
                if msg.error() is None:
                    values.append(msg.value())
                    seen[msg.partition()] = msg.offset() + 1
        return values
    finally:
        cons.close()


def test_the_sdk_renders_image_to_video_and_the_image_is_stored_once_by_reference(plane, client):
    worker = WorkerProc(plane, "i2v", MODEL, "http", (), gpu="any")
    try:
        worker.wait_ready()
        first = client.videos.create_and_poll(prompt="a red fox in snow", model=MODEL, **VIDEO,
                                              input_reference=("first.png", IMAGE, "image/png"),
                                              extra_body={"num_steps": 4, "seed": 5}, poll_interval_ms=200)
        second = client.videos.create_and_poll(prompt="a red fox at night", model=MODEL, **VIDEO,
                                               input_reference=("again.png", IMAGE, "image/png"),
                                               extra_body={"num_steps": 4, "seed": 5}, poll_interval_ms=200)
    finally:
        worker.stop()
    assert (first.status, second.status) == ("completed", "completed"), (first, second, worker.logs())
    for video in (first, second):
        frames = decode_frames(client.videos.download_content(video.id).read())
        assert frames.shape == (9, 32, 32, 3)
    # Stored once, under its hash, with its type; the jobs name that object.
    digest = hashlib.sha256(IMAGE).hexdigest()
    bucket = plane.settings.s3_bucket_artifacts
    listed = plane.s3.list_objects_v2(Bucket=bucket, Prefix=images.KEY_PREFIX).get("Contents", [])
    assert [o["Key"] for o in listed] == [f"inputs/sha256/{digest}"]
    stored = plane.s3.get_object(Bucket=bucket, Key=listed[0]["Key"])
    assert stored["Body"].read() == IMAGE and stored["ContentType"] == "image/png"
    for video in (first, second):
        [submitted] = events_of(plane.bus, video.id, ev.JobSubmitted) or [
            plane.bus.wait_event(video.id, ev.JobSubmitted, timeout=30)]
        assert images.parse(submitted.spec.input_image).sha256 == digest
    # No record of the events, commands or assignments topics holds the image, raw or in base64.
    needles = (IMAGE[60:124], base64.b64encode(IMAGE)[80:160])
    for topic in (events_topic(plane.settings), commands_topic(plane.settings), assignments_topic(plane.settings)):
        values = topic_values(plane, topic)
        assert values, topic
        assert not [v for v in values for n in needles if n in v], topic
    assert sum(digest.encode() in v for v in topic_values(plane, events_topic(plane.settings))) >= 2


def reference(model_dir, image: bytes, job) -> str:
    """The uninterrupted render of the job's request and image, in this process from step 0."""
    import torch

    from spotreel.worker.hf_logging import quietly
    from spotreel.worker.render_loop import Renderer, RenderRequest

    spec = job.spec
    req = RenderRequest.from_job(prompt=spec.prompt, seed=spec.seed, num_steps=spec.num_steps,
                                 resolution=spec.resolution, duration_s=spec.duration_s, fps=spec.fps,
                                 sampler="flow_euler", image_sha256=hashlib.sha256(image).hexdigest())
    torch.set_num_threads(1)  # as the workers run (--threads 1): same reduction order, same bits
    renderer = quietly(lambda: Renderer(model_dir))
    state = renderer.start(req, image)
    while not state.done:
        state = renderer.step(state)
    return frames_checksum(renderer.finish(state))


def test_a_killed_image_job_resumes_exactly_on_another_worker(plane, client, stack, monkeypatch):
    """Worker A checkpoints every step and is held at step 8 (the test-only hang hook), where it is killed
    with kill -9; B resumes from A's checkpoint (the image's first frame is in its latents: B reads no image)
    and the video's frames equal the uninterrupted render's."""
    from spotreel.worker.render_loop import TEST_HANG_ENV

    common = ("--once", "--checkpoint-every", "0.001", "--lease-ttl-ms", "5000")
    image = noise_png(2)
    with monkeypatch.context() as m:
        m.setenv(TEST_HANG_ENV, "8")
        a = WorkerProc(plane, "a", CHAOS_MODEL, "kafka", common, gpu="any")
    b = None
    try:
        a.wait_ready()
        video = client.videos.create(prompt="a boat on the river", model=CHAOS_MODEL, **VIDEO,
                                     input_reference=("boat.png", image, "image/png"),
                                     extra_body={"num_steps": 12, "seed": 9})
        a.wait_line(lambda l: l.get("event") == "step" and l.get("job_id") == video.id and l["step"] >= 8,
                    what="step 8")
        plane.bus.wait_event(video.id, ev.CheckpointRecorded, timeout=60)
        b = WorkerProc(plane, "b", CHAOS_MODEL, "http", common, gpu="any")
        b.wait_ready()
        a.signal(signal.SIGKILL)
        a.wait_exit(30)
        done = wait_done(plane.bus, video.id)
        assert b.wait_exit(60) == 0, b.logs()
    finally:
        a.stop()
        if b is not None:
            b.stop()
    leases = events_of(plane.bus, video.id, ev.JobLeased)
    assert [le.worker_id for le in leases] == [a.worker_id, b.worker_id]
    assert leases[1].resume_checkpoint_key and 0 < leases[1].resume_step <= 8
    assert done.epoch == 2
    [submitted] = events_of(plane.bus, video.id, ev.JobSubmitted)
    # The prompt travels sealed: the reference renders from the opened one, as the workers do.
    cluster = Cluster([stack.cassandra_host], port=stack.cassandra_port, protocol_version=5)
    try:
        submitted = plain(plane.settings, cluster.connect(plane.settings.cassandra_keyspace), submitted)
    finally:
        cluster.shutdown()
    assert submitted.spec.prompt == "a boat on the river"
    assert video_frames_checksum(plane, done.artifact_key) == reference(plane.model_dir, image, submitted)
    assert client.videos.retrieve(video.id).status in ("completed", "in_progress")
