"""Build a tiny random-weight text-to-video model on disk: a TextToVideoSDPipeline (family unet3d) or,
with `family`, a Wan / LTX-Video / CogVideoX pipeline (built by `model_tiny_dit.py`).

The tests and the demo load it through the same `from_pretrained` path as a full public model, so the
worker never has a "test mode". Nothing is downloaded: the tokenizer's vocabulary and merges are made
here from a small word list.

The build is deterministic (fixed torch seed, fixed configs) and idempotent: a marker file records a
fingerprint of the build recipe, and a second build with the same recipe does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from spotreel.worker.hf_logging import quietly

MARKER = "spotreel-tiny-model.json"
RECIPE_VERSION = 1

# Words that get whole-word tokens; every other word is spelled out byte by byte, which still works.
_WORDS = (
    "a an the of in on at with and to by from over under near into "
    "cat dog bird fish horse fox owl bear robot astronaut car boat train ship plane rocket "
    "man woman child people crowd city street forest beach ocean river mountain desert sky space moon sun "
    "rain snow fire water light night day sunset sunrise storm cloud clouds wave waves "
    "red blue green yellow orange purple black white golden silver dark bright "
    "running walking flying swimming dancing jumping riding driving sitting sleeping eating playing "
    "slow fast small big tiny giant old young happy "
    "video cinematic shot closeup aerial view drone camera 4k"
).split()


@dataclass(frozen=True)
class TinyConfig:
    """The knobs of the tiny model. `large` is the same architecture with wider, deeper blocks."""

    block_out_channels: tuple[int, ...] = (32, 64)
    layers_per_block: int = 1
    attention_head_dim: int = 4
    cross_attention_dim: int = 32
    text_layers: int = 2
    text_heads: int = 4
    vocab_size: int = 1000
    max_tokens: int = 32
    vae_channels: tuple[int, ...] = (32, 64)
    seed: int = 1234

    family: str = "unet3d"

    def recipe(self) -> dict:
        d = asdict(self)
        d["version"] = RECIPE_VERSION
        if self.family == "unet3d":
            d.pop("family")  # the recipe hash of the UNet3D builds stays what it was
        else:
            # The DiT families have one fixed tiny build each (model_tiny_dit.py); only the seed is shared.
            d = {"family": self.family, "seed": self.seed, "version": RECIPE_VERSION}
        return d


CONFIGS: dict[str, TinyConfig] = {
    "tiny": TinyConfig(),
    "large": TinyConfig(
        block_out_channels=(64, 128, 256),
        layers_per_block=2,
        attention_head_dim=8,
        cross_attention_dim=64,
        text_layers=4,
        text_heads=4,
    ),
}


def recipe_fingerprint(cfg: TinyConfig) -> str:
    blob = json.dumps(cfg.recipe(), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


# "ltx-i2v": LTX-Video image-to-video (LTXImageToVideoPipeline), the family ltx with an image input.
FAMILIES = ("unet3d", "wan", "ltx", "ltx-i2v", "cogvideox")


def build_tiny_model(out_dir: str | Path, config: str | TinyConfig = "tiny", family: str = "unet3d") -> bool:
    """Write the model to `out_dir`. Returns False when an identical build is already there.

    A directory that holds something else (another recipe, or unrelated files) is refused rather than
    overwritten, so a typo cannot wipe a real model.
    """
    cfg = _resolve(config, family)
    out = Path(out_dir)
    fp = recipe_fingerprint(cfg)
    marker = out / MARKER
    if marker.exists():
        existing = _marker_fingerprint(marker)
        if existing == fp:
            return False
        raise FileExistsError(f"{out} holds a different tiny model build (marker {existing!r}); use another DIR")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; refusing to write a model into it")

    out.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the target, then rename: a crash mid-build leaves no half model with a marker.
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=out.parent))
    try:
        quietly(lambda: _build(cfg).save_pretrained(tmp, safe_serialization=True))
        (tmp / MARKER).write_text(json.dumps({"fingerprint": fp, "recipe": cfg.recipe()}, indent=1))
        tmp.chmod(0o755)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        # Another process finished the same build first (two test sessions at once): that is success.
        if _marker_fingerprint(marker) == fp:
            return False
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def cached_model_dir(cache_dir: str | Path, config: str = "tiny", family: str = "unet3d") -> Path:
    """Where the tiny model of `config` lives under a cache directory; the name carries the recipe hash,
    so a changed recipe builds next to the old one instead of refusing."""
    name = config if family == "unet3d" else family
    return Path(cache_dir) / "models" / f"{name}-{recipe_fingerprint(_resolve(config, family))[:12]}"


def ensure_tiny_model(cache_dir: str | Path, config: str = "tiny", family: str = "unet3d") -> Path:
    """Build the model into the cache once; later calls only check the marker."""
    out = cached_model_dir(cache_dir, config, family)
    build_tiny_model(out, config, family)
    return out


def _marker_fingerprint(marker: Path) -> str | None:
    try:
        return json.loads(marker.read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def _resolve(config: str | TinyConfig, family: str = "unet3d") -> TinyConfig:
    from dataclasses import replace

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose one of {', '.join(FAMILIES)}")
    if isinstance(config, TinyConfig):
        return replace(config, family=family)
    try:
        return replace(CONFIGS[config], family=family)
    except KeyError:
        raise ValueError(f"unknown tiny model config {config!r}; choose one of {sorted(CONFIGS)}") from None


def _build(cfg: TinyConfig):
    import torch

    if cfg.family != "unet3d":
        from spotreel.worker.model_tiny_dit import BUILDERS

        torch.manual_seed(cfg.seed)
        return BUILDERS[cfg.family]()
    from diffusers import AutoencoderKL, DDIMScheduler, UNet3DConditionModel
    from diffusers.pipelines import TextToVideoSDPipeline
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(cfg.vocab_size, cfg.max_tokens)
    n = len(cfg.block_out_channels)
    unet = UNet3DConditionModel(
        block_out_channels=cfg.block_out_channels,
        layers_per_block=cfg.layers_per_block,
        down_block_types=("CrossAttnDownBlock3D",) * (n - 1) + ("DownBlock3D",),
        up_block_types=("UpBlock3D",) + ("CrossAttnUpBlock3D",) * (n - 1),
        cross_attention_dim=cfg.cross_attention_dim,
        attention_head_dim=cfg.attention_head_dim,
        norm_num_groups=32,
        in_channels=4,
        out_channels=4,
        sample_size=16,
    )
    m = len(cfg.vae_channels)
    vae = AutoencoderKL(
        block_out_channels=list(cfg.vae_channels),
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * m,
        up_block_types=["UpDecoderBlock2D"] * m,
        latent_channels=4,
        norm_num_groups=32,
        sample_size=32,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.cross_attention_dim,
            intermediate_size=cfg.cross_attention_dim * 2,
            num_hidden_layers=cfg.text_layers,
            num_attention_heads=cfg.text_heads,
            max_position_embeddings=cfg.max_tokens,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    return TextToVideoSDPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler
    )


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-printable-character table, which byte-level BPE tokenizers (CLIP's too) expect."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def tokenizer_vocab(vocab_size: int) -> tuple[dict[str, int], list[str]]:
    """A CLIP-style vocabulary: every byte alone and word-final, whole words from `_WORDS`, then specials."""
    symbols = _byte_symbols()
    tokens: list[str] = list(symbols) + [s + "</w>" for s in symbols]
    merges: list[str] = []
    for word in _WORDS:
        # Merge left to right: "cat" -> "c a", "ca t</w>"; each merge result becomes a token.
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        acc = parts[0]
        for nxt in parts[1:]:
            merge = f"{acc} {nxt}"
            acc = acc + nxt
            if merge not in merges:
                merges.append(merge)
            if acc not in tokens:
                tokens.append(acc)
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    if len(tokens) > vocab_size:
        raise ValueError(f"tokenizer needs {len(tokens)} ids but the text encoder has only {vocab_size}")
    return {tok: i for i, tok in enumerate(tokens)}, merges


def build_tokenizer(vocab_size: int, max_tokens: int):
    from transformers import CLIPTokenizer

    vocab, merges = tokenizer_vocab(vocab_size)
    pairs = [tuple(m.split(" ")) for m in merges]
    return CLIPTokenizer(vocab=vocab, merges=pairs, model_max_length=max_tokens)
