"""Envelopes, KEKs and the vault (spotreel/personal/): sealed fields open only under their own key, field and
job; an erased key opens nothing; a wrong KEK fails at the start check; rotation re-wraps without touching
what was sealed; no key material in what a process prints."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from spotreel.domain.commands import SubmitJob
from spotreel.domain.spec import RenderSpec
from spotreel.personal import envelope
from spotreel.personal.fields import open_spec_sync, seal_mapping, seal_record
from spotreel.personal.kek import KekError, LocalKek, create_kek_file
from spotreel.personal.keystore import MemoryKeystore
from spotreel.personal.setup import open_vault
from spotreel.personal.vault import Erased, Vault


def kek() -> LocalKek:
    return LocalKek(os.urandom(32))


@given(st.text(max_size=300))
def test_an_envelope_opens_to_its_text_and_carries_none_of_it(text):
    key = envelope.new_data_key()
    sealed = envelope.seal(key, "j" + "a" * 32, "prompt", text)
    assert envelope.is_sealed(sealed)
    assert envelope.open_envelope(key, "prompt", sealed) == text
    if len(text) >= 4:
        assert text not in sealed


def test_an_envelope_does_not_open_under_another_key_field_or_job():
    key = envelope.new_data_key()
    sealed = envelope.seal(key, "job1", "prompt", "a red fox")
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_envelope(envelope.new_data_key(), "prompt", sealed)
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_envelope(key, "negative_prompt", sealed)
    moved = sealed.replace("job1", "job2")
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_envelope(key, "prompt", moved)
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(envelope.EnvelopeError):
        envelope.open_envelope(key, "prompt", flipped)


def test_plain_text_written_before_encryption_reads_as_it_is():
    vault = Vault(MemoryKeystore(), kek())
    assert vault.open_sync("prompt", "an old plain prompt") == "an old plain prompt"
    assert vault.open_sync("callback_url", None) is None


def test_a_submission_is_sealed_whole_and_opens_back():
    vault = Vault(MemoryKeystore(), kek())
    spec = RenderSpec(model="m", prompt="a cat on a skateboard", duration_s=1.0, resolution="64x64", fps=8,
                      seed=1, num_steps=2, negative_prompt="blurry")
    submit = SubmitJob(command_id="c", job_id="j1", tenant="t", idempotency_key="k", request_hash="h",
                       gpu_type="cpu", spec=spec, callback_url="https://example.test/hook")
    sealer = vault.sealer_sync("j1", "t")
    sealed = seal_record(submit, sealer)
    assert envelope.is_sealed(sealed.spec.prompt) and envelope.is_sealed(sealed.spec.negative_prompt)
    assert envelope.is_sealed(sealed.callback_url)
    assert (sealed.spec.model, sealed.spec.seed, sealed.tenant) == ("m", 1, "t")  # the rest stays readable
    assert open_spec_sync(sealed.spec, vault) == spec
    assert vault.open_sync("callback_url", sealed.callback_url) == "https://example.test/hook"
    assert seal_record(sealed, sealer) == sealed  # sealing twice changes nothing
    params = seal_mapping({"callback_url": "https://x.test/", "fps": 8}, sealer)
    assert envelope.is_sealed(params["callback_url"]) and params["fps"] == 8


def test_two_accepts_of_one_job_seal_under_the_same_key():
    store = MemoryKeystore()
    a, b = Vault(store, k := kek()), Vault(store, k)
    one = a.sealer_sync("j1", "t").seal("prompt", "same job")
    assert b.open_sync("prompt", b.sealer_sync("j1", "t").seal("prompt", "x")) == "x"
    assert b.open_sync("prompt", one) == "same job"


def test_an_erased_key_opens_nothing_anywhere():
    store = MemoryKeystore()
    a, b = Vault(store, k := kek(), cache_seconds=0), Vault(store, k, cache_seconds=0)
    sealed = a.sealer_sync("j1", "t").seal("prompt", "secret plan")
    a.sealer_sync("j2", "t")
    a.sealer_sync("j3", "other")
    a.erase_sync("j1", "t")
    with pytest.raises(Erased):
        b.open_sync("prompt", sealed)
    assert sorted(a.tenant_key_ids("t")) == ["j2"]


def test_a_wrong_kek_fails_the_start_check_and_a_rotated_one_passes(tmp_path: Path):
    store = MemoryKeystore()
    old = kek()
    vault = Vault(store, old)
    vault.check()
    sealed = vault.sealer_sync("j1", "t").seal("prompt", "kept across rotation")
    with pytest.raises(KekError, match="refusing to start"):
        Vault(store, kek()).check()
    new = kek()
    before = dict(store.keys)
    assert vault.rotate(new) == 1
    assert store.keys["j1"].kek_id == new.kek_id and store.keys["j1"].wrapped != before["j1"].wrapped
    fresh = Vault(store, new)
    fresh.check()
    assert fresh.open_sync("prompt", sealed) == "kept across rotation"  # the sealed text was never touched
    with pytest.raises(KekError):
        Vault(store, old).check()


def test_a_missing_kek_file_is_made_only_for_an_empty_keystore(tmp_path: Path):
    class S:
        home = tmp_path
        kek_file = ""
        kek_previous_file = ""
        data_key_cache_seconds = 30
    store = MemoryKeystore()
    vault = open_vault(S, store)  # a new deployment: the file is made
    assert (tmp_path / "keys" / "kek").exists()
    assert oct((tmp_path / "keys" / "kek").stat().st_mode & 0o777) == "0o600"
    vault.sealer_sync("j1", "t")
    (tmp_path / "keys" / "kek").unlink()
    with pytest.raises(KekError, match="is missing"):
        open_vault(S, store)
    assert create_kek_file(tmp_path / "keys" / "kek")
    with pytest.raises(KekError, match="refusing to start"):
        open_vault(S, store)


def test_no_key_material_in_reprs_or_errors(tmp_path: Path):
    raw = os.urandom(32)
    k = LocalKek(raw)
    vault = Vault(MemoryKeystore(), k)
    sealer = vault.sealer_sync("j1", "t")
    data_key = vault.data_key_sync("j1")
    texts = [repr(k), repr(vault), repr(sealer), str(sealer)]
    try:
        Vault(vault.keystore, kek()).check()
    except KekError as exc:
        texts.append(str(exc))
    path = tmp_path / "bad"
    path.write_text("not base64 !!")
    try:
        LocalKek.from_file(path)
    except KekError as exc:
        texts.append(str(exc))
    for secret in (raw, data_key):
        for form in (secret.hex(), base64.b64encode(secret).decode(), base64.urlsafe_b64encode(secret).decode()):
            assert not any(form[:16] in t for t in texts)
