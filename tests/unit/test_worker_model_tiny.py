"""`spotreel model tiny DIR`: deterministic, idempotent, loadable by the normal code path, clear errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from spotreel.cli import main
from spotreel.worker.model_tiny import MARKER, build_tokenizer, tokenizer_vocab

pytestmark = pytest.mark.unit


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_build_is_byte_for_byte_deterministic_and_then_a_no_op(tmp_path: Path, tiny_model_dir: Path,
                                                             capsys) -> None:
    target = tmp_path / "model"
    assert run_cli(capsys, "model", "tiny", str(target)) == (0, f"built: {target}\n", "")
    assert tree_digest(target) == tree_digest(tiny_model_dir)
    before = {p: p.stat().st_mtime_ns for p in target.rglob("*")}
    assert run_cli(capsys, "model", "tiny", str(target)) == (0, f"already built: {target}\n", "")
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == before


def test_layout_is_a_text_to_video_pipeline_directory(tiny_model_dir: Path) -> None:
    index = json.loads((tiny_model_dir / "model_index.json").read_text())
    assert index["_class_name"] == "TextToVideoSDPipeline"
    assert index["unet"] == ["diffusers", "UNet3DConditionModel"]
    assert {"vae", "text_encoder", "tokenizer", "scheduler"} <= index.keys()
    assert list((tiny_model_dir / "unet").glob("*.safetensors")), "weights are safetensors, not pickle"
    assert json.loads((tiny_model_dir / MARKER).read_text())["fingerprint"]


def test_tokenizer_is_byte_level_bpe_within_the_text_encoders_vocabulary() -> None:
    vocab, merges = tokenizer_vocab(1000)
    assert len(vocab) <= 1000 and len(set(vocab.values())) == len(vocab)
    tok = build_tokenizer(1000, 32)
    ids = tok("A golden robot dancing — at sunset! ✨").input_ids
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert max(ids) < 1000
    assert "robot</w>" in tok.convert_ids_to_tokens(ids)  # a listed word is one token
    assert len(tok("word " * 100, truncation=True).input_ids) == 32
    with pytest.raises(ValueError, match="only 100"):
        tokenizer_vocab(100)


def test_a_non_empty_directory_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    code, out, err = run_cli(capsys, "model", "tiny", str(tmp_path))
    assert code == 1 and out == "" and "not empty" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_another_recipe_in_the_directory_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / MARKER).write_text(json.dumps({"fingerprint": "something-else"}))
    code, _, err = run_cli(capsys, "model", "tiny", str(tmp_path))
    assert code == 1 and "different tiny model build" in err


def test_unknown_config_is_refused(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "model", "tiny", str(tmp_path / "m"), "--config", "huge")
    assert code == 2 and "unknown --config 'huge'" in err
    assert not (tmp_path / "m").exists()
