"""Exact resume through real S3 (DESIGN §2.6): run N steps, checkpoint at a random step k into SeaweedFS,
load it into a FRESH Renderer, finish, and get the very same uint8 frames; plus every way a stored
checkpoint can be wrong, each caught as its typed error."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from spotreel.worker.checkpoints import CheckpointCorrupt, CheckpointMismatch, CheckpointStore
from spotreel.worker.render_loop import Renderer, RenderRequest
from spotreel.media.video import frames_checksum


def request(sampler: str, seed: int, **over) -> RenderRequest:
    base = dict(prompt="an astronaut riding a horse on the moon", seed=seed, num_steps=10, width=32,
                height=32, num_frames=4, fps=8, sampler=sampler)
    base.update(over)
    return RenderRequest(**base)


@pytest.fixture(scope="module")
def renderer(tiny_model_dir: Path) -> Renderer:
    return Renderer(tiny_model_dir)


@pytest.fixture
def store(s3, bucket: str) -> CheckpointStore:
    return CheckpointStore(s3, bucket)


@pytest.mark.parametrize("sampler", ["ddim", "euler_a"])
def test_resume_from_s3_in_a_fresh_renderer_is_bit_identical(renderer: Renderer, tiny_model_dir: Path,
                                                             store: CheckpointStore, sampler: str) -> None:
    req = request(sampler, seed=random.randrange(2**32))
    k = random.randrange(1, req.num_steps)
    state, saved = renderer.start(req), None
    while not state.done:
        if state.step == k:
            saved = store.save("job-a", epoch=3, step=k, ckpt=renderer.snapshot(state))
        state = renderer.step(state)
    uninterrupted = renderer.finish(state)

    assert saved is not None and "job-a" in saved.key and "e00000003" in saved.key and f"s{k:06d}" in saved.key
    fresh = Renderer(tiny_model_dir)  # another worker: nothing shared but the model directory and S3
    resumed = fresh.resume(req, store.load(saved.key, saved.checksum, fresh.fingerprint(req)))
    assert resumed.step == k
    while not resumed.done:
        resumed = fresh.step(resumed)
    frames = fresh.finish(resumed)
    assert frames_checksum(frames) == frames_checksum(uninterrupted), f"k={k} {req}"
    assert np.array_equal(frames, uninterrupted)


def _saved(renderer: Renderer, store: CheckpointStore, req: RenderRequest, epoch: int = 1, steps: int = 2):
    state = renderer.start(req)
    for _ in range(steps):
        state = renderer.step(state)
    return store.save("job-b", epoch=epoch, step=state.step, ckpt=renderer.snapshot(state))


def test_checksum_and_metadata_are_stored_with_the_object(renderer, store, s3, bucket) -> None:
    req = request("ddim", seed=1)
    saved = _saved(renderer, store, req)
    head = s3.head_object(Bucket=bucket, Key=saved.key)
    assert head["ContentLength"] == saved.size_bytes
    assert head["Metadata"]["checksum-sha256"] == saved.checksum
    assert head["Metadata"]["fingerprint"] == renderer.fingerprint(req)


@pytest.mark.parametrize("where", ["header", "middle", "last"])
def test_a_flipped_byte_in_s3_is_corrupt(renderer, store, s3, bucket, where: str) -> None:
    req = request("euler_a", seed=2)
    saved = _saved(renderer, store, req)
    blob = bytearray(s3.get_object(Bucket=bucket, Key=saved.key)["Body"].read())
    pos = {"header": 10, "middle": len(blob) // 2, "last": len(blob) - 1}[where]
    blob[pos] ^= 0x40
    s3.put_object(Bucket=bucket, Key=saved.key, Body=bytes(blob))
    with pytest.raises(CheckpointCorrupt):
        store.load(saved.key, saved.checksum, renderer.fingerprint(req))


def test_a_truncated_object_is_corrupt(renderer, store, s3, bucket) -> None:
    req = request("ddim", seed=3)
    saved = _saved(renderer, store, req)
    blob = s3.get_object(Bucket=bucket, Key=saved.key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=saved.key, Body=blob[: len(blob) // 3])
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        store.load(saved.key, None, renderer.fingerprint(req))


def test_a_sound_object_that_is_not_the_recorded_one_is_corrupt(renderer, store) -> None:
    """A stale worker overwrote nothing (keys carry the epoch), but if the bytes differ from the checksum
    that the accepted event recorded, they are not used."""
    req = request("ddim", seed=4)
    first = _saved(renderer, store, req, steps=2)
    other = _saved(renderer, store, request("ddim", seed=5), steps=2)
    assert first.key == other.key and first.checksum != other.checksum
    with pytest.raises(CheckpointCorrupt, match="recorded"):
        store.load(first.key, first.checksum, renderer.fingerprint(req))


def test_a_missing_object_is_corrupt(renderer, store) -> None:
    with pytest.raises(CheckpointCorrupt, match="missing"):
        store.load("ckpt/job-x/e00000001/s000001.ckpt", None, "fp")


def test_another_request_is_a_mismatch_at_load_and_at_resume(renderer, store) -> None:
    req = request("ddim", seed=6)
    saved = _saved(renderer, store, req)
    other = request("ddim", seed=6, prompt="a boat on the river")
    with pytest.raises(CheckpointMismatch):
        store.load(saved.key, saved.checksum, renderer.fingerprint(other))
    ckpt = store.load(saved.key, saved.checksum, renderer.fingerprint(req))
    with pytest.raises(CheckpointMismatch):
        renderer.resume(other, ckpt)


def test_prune_keeps_the_newest_and_deletes_the_rest(renderer, store) -> None:
    req = request("ddim", seed=7, num_steps=6)
    state = renderer.start(req)
    keys = []
    for epoch in (1, 2):
        for _ in range(3 if epoch == 1 else 2):
            state = renderer.step(state)
            keys.append(store.save("job-c", epoch=epoch, step=state.step, ckpt=renderer.snapshot(state)).key)
    store.save("job-other", epoch=1, step=state.step, ckpt=renderer.snapshot(state))
    assert store.list_keys("job-c") == sorted(keys)
    newest = store.newest("job-c", 2)
    assert newest == [keys[-1], keys[-2]]  # epoch 2 beats epoch 1, then step order
    assert store.prune("job-c", set(newest)) == 3
    assert store.list_keys("job-c") == sorted(newest)
    assert len(store.list_keys("job-other")) == 1, "pruning one job never touches another"
    assert store.prune("job-c", set()) == 2 and store.list_keys("job-c") == []


def test_keys_refuse_what_would_escape_the_job_prefix(store) -> None:
    with pytest.raises(ValueError, match="job id"):
        store.key_for("a/b", 1, 1)
    with pytest.raises(ValueError, match=">= 0"):
        store.key_for("a", -1, 1)
