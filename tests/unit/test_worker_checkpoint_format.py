"""The checkpoint blob: what goes in comes out, and any damage is a typed CheckpointCorrupt."""

from __future__ import annotations

import hashlib

import pytest
import torch
from hypothesis import given, settings, strategies as st

from spotreel.worker.checkpoints import (MAGIC, Checkpoint, CheckpointCorrupt, checksum_of, decode, encode)
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8]


@st.composite
def checkpoints(draw) -> Checkpoint:
    tensors = {}
    for i in range(draw(st.integers(0, 3))):
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
        dtype = draw(st.sampled_from(_DTYPES))
        seed = draw(st.integers(0, 2**31))
        g = torch.Generator().manual_seed(seed)
        t = torch.randint(0, 200, shape, generator=g).to(dtype) if dtype in (torch.int64, torch.uint8) \
            else torch.randn(shape, generator=g).to(dtype)
        tensors[f"t{i}.{draw(st.sampled_from(['latents', 'rng', 'x']))}"] = t
    meta = draw(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=3))
    return Checkpoint(step=draw(st.integers(0, 10_000)), fingerprint=draw(st.text(min_size=1, max_size=64)),
                      tensors=tensors, meta=meta)


def _same(a: Checkpoint, b: Checkpoint) -> None:
    assert (a.step, a.fingerprint, a.meta) == (b.step, b.fingerprint, b.meta)
    assert a.tensors.keys() == b.tensors.keys()
    for name, t in a.tensors.items():
        assert b.tensors[name].dtype == t.dtype and torch.equal(b.tensors[name], t), name


@settings(max_examples=60, deadline=None)
@given(checkpoints())
def test_round_trip_keeps_every_tensor_bit_for_bit(ckpt: Checkpoint) -> None:
    _same(ckpt, decode(encode(ckpt)))


@settings(max_examples=60, deadline=None)
@given(checkpoints(), st.data())
def test_a_truncated_blob_is_corrupt(ckpt: Checkpoint, data) -> None:
    blob = encode(ckpt)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(CheckpointCorrupt):
        decode(blob[:cut])


@settings(max_examples=examples(200), deadline=None)
@given(checkpoints(), st.data())
def test_any_flipped_byte_is_corrupt(ckpt: Checkpoint, data) -> None:
    blob = bytearray(encode(ckpt))
    pos = data.draw(st.integers(0, len(blob) - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CheckpointCorrupt):
        decode(bytes(blob))


def test_checksum_is_the_payload_sha256_and_is_stable() -> None:
    ckpt = Checkpoint(step=3, fingerprint="fp", tensors={"latents": torch.ones(2, 3)}, meta={"a": 1})
    blob = encode(ckpt)
    assert blob.startswith(MAGIC)
    assert checksum_of(blob) == hashlib.sha256(blob[len(MAGIC) + 32:]).hexdigest()
    assert encode(ckpt) == blob  # same checkpoint, same bytes: safe to compare checksums across workers


def test_the_payload_is_a_plain_safetensors_file_with_json_metadata() -> None:
    from safetensors import safe_open
    import json
    import tempfile

    blob = encode(Checkpoint(step=5, fingerprint="abc", tensors={"latents": torch.zeros(1, 4)}, meta={"k": "v"}))
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as fh:
        fh.write(blob[len(MAGIC) + 32:])
        fh.flush()
        with safe_open(fh.name, framework="pt") as f:
            doc = json.loads(f.metadata()["spotreel"])
            assert list(f.keys()) == ["latents"]
    assert doc == {"format": 1, "step": 5, "fingerprint": "abc", "meta": {"k": "v"}}


@pytest.mark.parametrize("blob", [b"", b"SRCKPT1", b"not a checkpoint at all, just some bytes here....",
                                  MAGIC + b"\x00" * 32])
def test_garbage_is_corrupt(blob: bytes) -> None:
    with pytest.raises(CheckpointCorrupt):
        decode(blob)


def test_a_foreign_payload_with_a_valid_checksum_is_still_corrupt() -> None:
    from safetensors.torch import save

    payload = save({"x": torch.ones(1)})  # no spotreel metadata
    with pytest.raises(CheckpointCorrupt, match="unreadable"):
        decode(MAGIC + hashlib.sha256(payload).digest() + payload)


def test_negative_step_is_refused_at_encode() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        encode(Checkpoint(step=-1, fingerprint="f", tensors={}))
