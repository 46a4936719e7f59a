"""Per model family: step time, VAE decode, peak memory and checkpoint cost at the real architectures' sizes
with random weights, and whether a resume from a checkpoint ends on bit-identical latents.

    .venv/bin/python bench/family_bench.py --scale tiny                    # CPU smoke test of every path (~1 min)
    python3 bench/family_bench.py --scale real --device cuda --mode perf --json perf.json
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 bench/family_bench.py --scale real --device cuda --mode det --json det.json

Each family's pipeline is built in memory with random weights of its real architecture (REAL below: the
diffusers classes' own defaults where they are the published model's config, Wan 2.1 1.3B's numbers
otherwise) directly on the device in the dtype a worker would serve it in, and driven through the worker's
own Renderer (start, step, snapshot, checkpoint encode/decode, resume, finish). Text encoders keep the real
hidden size but have 2 layers instead of 24 (UMT5-XXL, T5-v1.1-XXL) or 23 (OpenCLIP ViT-H), and a small
offline vocabulary: they run once per render, outside the per-step figures.

--mode perf: per family, K steps of the default sampler (the first is a warm-up; the step time is the median
of the rest), the checkpoint cost C at step k (snapshot + safetensors/JSON encode with its sha256 + write to a
local file + fsync, median of --ckpt-reps), the VAE decode whole (twice: cold, warm) and tiled, and the peak
GPU memory of each phase; the resume tests without deterministic algorithms. --mode det: the resume tests
with torch.use_deterministic_algorithms(True) (the process must start with CUBLAS_WORKSPACE_CONFIG=:4096:8).
The resume tests run the family's default sampler and DPM++ (multistep) where the family offers it.
--mode save then --mode load (two processes, same --xdir): the first renders K steps and keeps the checkpoint
taken at step k and the final latents; the second, a fresh process as a worker taking over would be, builds
the same random weights (checked by a hash), renders K steps again (repeatability across processes) and
resumes from the first one's checkpoint; both compared bit for bit with the first process's final latents.

Resume test: render K steps undisturbed, snapshot at step k on the way (a snapshot copies, the state runs on),
encode the checkpoint as the worker does, decode the blob, Renderer.resume from it, run to K, and compare the
final latents bit for bit. Renderer.resume casts the saved latents to the renderer's dtype; where a family
keeps float32 latents under a half-precision model (Wan, LTX) the test also resumes with the latents left in
the checkpoint's dtype, which separates what the cast does from what the GPU does.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_line  # noqa: E402  (bench/ is no package: the script's own folder)

from spotreel.domain.checkpoint_interval import optimal_interval_s
from spotreel.worker.checkpoints import decode, encode
from spotreel.worker.families import family_for
from spotreel.worker.hf_logging import quietly
from spotreel.worker.render_loop import Renderer, RenderRequest

PROMPT = "a golden fox running on the beach at sunset, cinematic aerial shot"
NEGATIVE = "blurry, low quality, still frame"


@dataclasses.dataclass(frozen=True)
class Shape:
    dtype: str
    width: int
    height: int
    frames: int
    fps: int
    guidance: float  # the model card's usual classifier-free guidance: two transformer passes per step


# The shapes a real render of each model takes, and the dtype it is served in (CogVideoX-2B and zeroscope in
# fp16 as their cards say, Wan 2.1 and LTX-Video in bf16).
REAL_SHAPES = {
    "wan": Shape("bfloat16", 832, 480, 33, 16, 5.0),
    "ltx": Shape("bfloat16", 768, 512, 33, 24, 3.0),
    "cogvideox": Shape("float16", 720, 480, 49, 8, 6.0),
    "unet3d": Shape("float16", 576, 320, 24, 8, 9.0),
}
# The tiny builds' shapes (tests/unit/test_worker_families.py), float32 on the CPU.
TINY_SHAPES = {
    "wan": Shape("float32", 16, 16, 5, 16, 5.0),
    "ltx": Shape("float32", 32, 32, 9, 24, 3.0),
    "cogvideox": Shape("float32", 16, 16, 9, 8, 6.0),
    "unet3d": Shape("float32", 32, 32, 4, 8, 9.0),
}

# The configs used at --scale real (written into the results).
T5_XXL = dict(d_model=4096, d_kv=64, d_ff=10240, num_heads=64, relative_attention_num_buckets=32,
              relative_attention_max_distance=128, feed_forward_proj="gated-gelu", num_layers=2)  # real: 24 layers
REAL = {
    "wan": {
        "model": "Wan 2.1 T2V 1.3B (Wan-AI/Wan2.1-T2V-1.3B-Diffusers)",
        "transformer": dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                            out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024),
        "vae": "AutoencoderKLWan() defaults (Wan 2.1 VAE: base_dim 96, z_dim 16, dim_mult 1,2,4,4)",
        "text_encoder": dict(kind="UMT5EncoderModel", **T5_XXL),
        "scheduler": dict(cls="UniPCMultistepScheduler", prediction_type="flow_prediction", use_flow_sigmas=True,
                          num_train_timesteps=1000, flow_shift=3.0),
        "max_sequence_length": 512,
    },
    "ltx": {
        "model": "LTX-Video 0.9.0 2B (Lightricks/LTX-Video)",
        "transformer": "LTXVideoTransformer3DModel() defaults (28 layers, 32 heads x 64, in 128, cross 2048)",
        "vae": "AutoencoderKLLTXVideo() defaults (0.9.0 VAE: 128 latent channels, 32x spatial, 8x temporal, "
               "no timestep conditioning)",
        "text_encoder": dict(kind="T5EncoderModel", **T5_XXL),
        "scheduler": dict(cls="FlowMatchEulerDiscreteScheduler", use_dynamic_shifting=True, base_shift=0.95,
                          max_shift=2.05, base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1),
        "max_sequence_length": 128,
    },
    "cogvideox": {
        "model": "CogVideoX-2B (THUDM/CogVideoX-2b)",
        "transformer": "CogVideoXTransformer3DModel() defaults (30 layers, 30 heads x 64, patch 2, "
                       "226 text tokens, sinusoidal positions)",
        "vae": "AutoencoderKLCogVideoX() defaults",
        "text_encoder": dict(kind="T5EncoderModel", **T5_XXL),
        "scheduler": dict(cls="CogVideoXDDIMScheduler", beta_schedule="scaled_linear", beta_start=0.00085,
                          beta_end=0.012, prediction_type="v_prediction", rescale_betas_zero_snr=True,
                          set_alpha_to_one=True, timestep_spacing="trailing", clip_sample=False, snr_shift_scale=3.0),
        "max_sequence_length": 226,
    },
    "unet3d": {
        "model": "zeroscope_v2_576w (cerspense/zeroscope_v2_576w; ModelScope text-to-video-ms-1.7b's UNet)",
        "transformer": "UNet3DConditionModel() defaults (320,640,1280,1280, 2 layers per block, cross 1024, "
                       "head dim 64)",
        "vae": dict(cls="AutoencoderKL", block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                    latent_channels=4, sample_size=512),
        "text_encoder": dict(kind="CLIPTextModel", hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                             max_position_embeddings=77, num_hidden_layers=2),  # real: 23 layers
        "scheduler": dict(cls="DDIMScheduler", beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                          clip_sample=False, set_alpha_to_one=False, steps_offset=1),
        "max_sequence_length": 77,
    },
}
FAMILY_ORDER = ("wan", "ltx", "cogvideox", "unet3d")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
         torch.float64: torch.int64}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=("tiny", "real"), default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", choices=("perf", "det", "save", "load"), default="perf",
                   help="perf: timings + resume tests; det: resume tests with deterministic algorithms; save/load: "
                        "the cross-process resume test's two halves (--xdir)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch.use_deterministic_algorithms(True) (implied by --mode det)")
    p.add_argument("--xdir", type=Path, help="save/load: where the checkpoints and final latents are kept")
    p.add_argument("--families", default=",".join(FAMILY_ORDER))
    p.add_argument("--samplers", choices=("default", "two"), default="two",
                   help="samplers the resume test runs: the family's default, plus DPM++ (multistep) where offered")
    p.add_argument("--steps", type=int, default=6, help="K: steps of every render")
    p.add_argument("--stop-at", type=int, default=3, help="k: the step the checkpoint is taken at")
    p.add_argument("--ckpt-reps", type=int, default=5)
    p.add_argument("--typical-steps", type=int, default=50, help="steps of a real render, for seconds per video")
    p.add_argument("--mtbf", type=float, default=3600.0)
    p.add_argument("--lo", type=float, default=5.0)
    p.add_argument("--hi", type=float, default=600.0)
    p.add_argument("--dtype", choices=sorted(_DTYPES), help="override every family's dtype")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


# -- building ---------------------------------------------------------------------------------------------------


def _t5_encoder(umt5: bool, vocab_size: int):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    kw = dict(vocab_size=vocab_size, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, **T5_XXL)
    return UMT5EncoderModel(UMT5Config(**kw)) if umt5 else T5EncoderModel(T5Config(**kw))


def _scheduler(spec: dict):
    import diffusers

    kw = dict(spec)
    return getattr(diffusers, kw.pop("cls"))(**kw)


def build_real(family: str, device: torch.device):
    """The pipeline of `family` at its real architecture (REAL): its models constructed directly on `device`
    (no CPU init of billions of parameters), tokenizer and scheduler on the CPU as from_pretrained makes them."""
    import diffusers
    from spotreel.worker.model_tiny import build_tokenizer
    from spotreel.worker.model_tiny_dit import build_t5_tokenizer

    cfg = REAL[family]
    scheduler = _scheduler(cfg["scheduler"])
    if family in ("wan", "ltx", "cogvideox"):
        tok = build_t5_tokenizer(cfg["max_sequence_length"])
        with device:
            text_encoder = _t5_encoder(family == "wan", len(tok))
            if family == "wan":
                return diffusers.WanPipeline(tokenizer=tok, text_encoder=text_encoder, scheduler=scheduler,
                                             transformer=diffusers.WanTransformer3DModel(**cfg["transformer"]),
                                             vae=diffusers.AutoencoderKLWan())
            if family == "ltx":
                return diffusers.LTXPipeline(tokenizer=tok, text_encoder=text_encoder, scheduler=scheduler,
                                             transformer=diffusers.LTXVideoTransformer3DModel(),
                                             vae=diffusers.AutoencoderKLLTXVideo())
            return diffusers.CogVideoXPipeline(tokenizer=tok, text_encoder=text_encoder, scheduler=scheduler,
                                               transformer=diffusers.CogVideoXTransformer3DModel(),
                                               vae=diffusers.AutoencoderKLCogVideoX())
    if family == "unet3d":
        from diffusers.pipelines import TextToVideoSDPipeline
        from transformers import CLIPTextConfig, CLIPTextModel

        tok = build_tokenizer(1000, cfg["max_sequence_length"])
        te_cfg = {k: v for k, v in cfg["text_encoder"].items() if k != "kind"}
        v = cfg["vae"]
        with device:
            text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=1000, bos_token_id=tok.bos_token_id,
                                                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                                        **te_cfg))
            vae = diffusers.AutoencoderKL(block_out_channels=v["block_out_channels"],
                                          layers_per_block=v["layers_per_block"],
                                          down_block_types=["DownEncoderBlock2D"] * 4,
                                          up_block_types=["UpDecoderBlock2D"] * 4,
                                          latent_channels=v["latent_channels"], sample_size=v["sample_size"])
            unet = diffusers.UNet3DConditionModel()
        return TextToVideoSDPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tok, unet=unet,
                                     scheduler=scheduler)
    raise ValueError(family)


def build_tiny(family: str):
    from spotreel.worker.model_tiny import _build, _resolve

    return _build(_resolve("tiny", family))


@torch.no_grad()
def random_init(module: torch.nn.Module, std: float = 0.02) -> None:
    """Small normal weights for every matrix and kernel (norm scales and biases keep their defaults), so 30
    random layers stay finite."""
    for p in module.parameters():
        if p.dim() >= 2:
            p.normal_(0.0, std)


def cast(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """`module` to `dtype`, keeping its `_keep_in_fp32_modules` in float32 as from_pretrained(torch_dtype=...) does."""
    module.to(dtype)
    keep = getattr(module, "_keep_in_fp32_modules", None) or []
    if dtype != torch.float32 and keep:
        for name, sub in module.named_modules():
            if any(k in name.split(".") for k in keep):
                sub.to(torch.float32)


def renderer_around(pipe, device: torch.device, dtype: torch.dtype, model_id: str) -> Renderer:
    """A worker Renderer around a pipeline built in memory. Renderer.__init__ loads a directory with
    from_pretrained and hashes its files (gigabytes of random weights would have to be written and read back);
    every other attribute it sets is set here the same way (the tiny run checks the set of attributes against
    a Renderer built from a directory), so start, step, snapshot, resume and finish are the worker's own code."""
    r = Renderer.__new__(Renderer)
    r.vae_tiling, r.tile_above_voxels, r.limits = "off", None, None
    r.model_dir = Path("/nonexistent/in-memory")
    r.device, r.dtype = device, dtype
    pipe.set_progress_bar_config(disable=True)
    r.family = family_for(pipe, device, dtype)
    for module in r.family.modules():
        module.eval()
        module.requires_grad_(False)
    r.default_sampler = r.family.default_sampler
    r.model_id = model_id
    r._hang = None
    r.numerics = r._numerics()
    return r


def check_renderer_attributes(family: str) -> None:
    """Fail when Renderer.__init__ sets attributes renderer_around does not (the bench would then skip them)."""
    from spotreel.config.settings import Settings
    from spotreel.worker.model_tiny import ensure_tiny_model

    real = quietly(lambda: Renderer(ensure_tiny_model(Settings.from_env().cache_dir, family=family)))
    ours = renderer_around(build_tiny(family), real.device, real.dtype, "x")
    if set(vars(real)) != set(vars(ours)):
        raise RuntimeError(f"Renderer's attributes changed: {sorted(set(vars(real)) ^ set(vars(ours)))}; "
                           f"update renderer_around")


def check_real_configs(families: list[str]) -> dict[str, Any]:
    """Construct every real build on the meta device (no memory, no time) and hold the real shapes to the
    family's own checks, so a typo in REAL or REAL_SHAPES fails here on a CPU and not on a lent GPU."""
    meta = torch.device("meta")
    counts = {}
    for family in families:
        pipe = quietly(lambda: build_real(family, meta))
        for m in pipe.components.values():
            if isinstance(m, torch.nn.Module):
                random_init(m)
                quietly(lambda m=m: cast(m, _DTYPES[REAL_SHAPES[family].dtype]))
        r = renderer_around(pipe, meta, _DTYPES[REAL_SHAPES[family].dtype], "meta")
        shape = REAL_SHAPES[family]
        for sampler in r.family.samplers:
            r.check(RenderRequest(prompt=PROMPT, seed=1, num_steps=6, width=shape.width, height=shape.height,
                                  num_frames=shape.frames, fps=shape.fps, sampler=sampler,
                                  guidance_scale=shape.guidance))
        counts[family] = params(pipe)
        print(f"   real {family} constructs on meta; params (M) {counts[family]}", flush=True)
    return counts


# -- measuring --------------------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None


def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """Bit-for-bit comparison (NaN-safe: the bits are compared, not the values) and the largest difference."""
    a, b = a.detach().cpu(), b.detach().cpu()
    bit = (a.dtype == b.dtype and a.shape == b.shape and a.dtype in _BITS
           and torch.equal(a.view(_BITS[a.dtype]), b.view(_BITS[b.dtype])))
    diff = (a.float() - b.float()).abs()
    finite = diff[torch.isfinite(diff)]
    return {"bit_identical": bool(bit), "max_abs_diff": float(finite.max()) if finite.numel() else None,
            "differing_elements": int((diff != 0).sum()), "elements": a.numel(),
            "nonfinite_undisturbed": int((~torch.isfinite(a.float())).sum()),
            "dtypes": [str(a.dtype), str(b.dtype)]}


def checkpoint_cost(r: Renderer, state, reps: int, tmp: Path) -> tuple[dict[str, Any], bytes]:
    """The worker's checkpoint path: Renderer.snapshot (device -> host), checkpoints.encode (safetensors + JSON +
    sha256), then a local file written and fsynced (where the worker PUTs to S3)."""
    snap, enc, write, total = [], [], [], []
    blob = b""
    path = tmp / "ckpt.bin"
    for _ in range(reps):
        sync(r.device)
        c0 = time.perf_counter()
        ckpt = r.snapshot(state)
        c1 = time.perf_counter()
        blob = encode(ckpt)
        c2 = time.perf_counter()
        with path.open("wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        c3 = time.perf_counter()
        snap.append(c1 - c0)
        enc.append(c2 - c1)
        write.append(c3 - c2)
        total.append(c3 - c0)
    med = statistics.median
    tensors = {k: [list(v.shape), str(v.dtype)] for k, v in ckpt.tensors.items() if v.numel() > 1000}
    return {"bytes": len(blob), "snapshot_s": round(med(snap), 6), "encode_s": round(med(enc), 6),
            "write_fsync_s": round(med(write), 6), "cost_s": round(med(total), 6),
            "cost_s_all": [round(x, 6) for x in total], "large_tensors": tensors}, blob


def run_to_end(r: Renderer, state, times: list[float] | None = None):
    while not state.done:
        s0 = time.perf_counter()
        state = r.step(state)
        sync(r.device)
        if times is not None:
            times.append(time.perf_counter() - s0)
    return state


def resume_test(r: Renderer, req: RenderRequest, k: int, ckpt_reps: int, tmp: Path,
                with_cost: bool) -> tuple[dict[str, Any], Any]:
    """Undisturbed K steps (timed), a checkpoint at step k on the way, a resume from it to K; compared."""
    device = r.device
    out: dict[str, Any] = {"sampler": req.sampler, "steps": req.num_steps, "stop_at": k}
    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    state = r.start(req)
    sync(device)
    out["start_s"] = round(time.perf_counter() - t0, 4)  # latents + prompt encoding
    times: list[float] = []
    blob = b""
    while not state.done:
        if state.step == k:
            if with_cost:
                out["checkpoint"], blob = checkpoint_cost(r, state, ckpt_reps, tmp)
            else:
                blob = encode(r.snapshot(state))
        s0 = time.perf_counter()
        state = r.step(state)
        sync(device)
        times.append(time.perf_counter() - s0)
    out["peak_gib_steps"] = peak_gib(device)
    out["step_s"] = [round(x, 5) for x in times]
    out["step_s_median"] = round(statistics.median(times[1:] if len(times) > 1 else times), 5)
    out["latents"] = [list(state.latents.shape), str(state.latents.dtype)]

    ckpt = decode(blob)
    resumed = run_to_end(r, r.resume(req, ckpt))
    out["resume_as_worker"] = compare(state.latents, resumed.latents)
    saved = ckpt.tensors["latents"]
    if saved.dtype != r.dtype:
        # Renderer.resume casts the saved latents to the renderer's dtype; resume again without that cast.
        again = r.resume(req, decode(blob))
        again = dataclasses.replace(again, latents=saved.to(device))
        out["resume_latents_in_checkpoint_dtype"] = compare(state.latents, run_to_end(r, again).latents)
    return out, state


def decode_figures(r: Renderer, state) -> list[dict[str, Any]]:
    """Renderer.finish whole (cold, then warm) and tiled (+ sliced), each with its peak memory."""
    rows = []
    for label, tiling in (("whole (first)", "off"), ("whole", "off"), ("tiled", "on")):
        r.vae_tiling = tiling
        row: dict[str, Any] = {"decode": label}
        try:
            reset_peak(r.device)
            sync(r.device)
            t0 = time.perf_counter()
            frames = r.finish(state)
            sync(r.device)
            row.update(seconds=round(time.perf_counter() - t0, 4), peak_gib=peak_gib(r.device),
                       frames=list(frames.shape))
            del frames
        except torch.OutOfMemoryError as exc:
            row["error"] = f"OOM: {str(exc)[:300]}"
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"    decode {label}: {row}", flush=True)
    r.vae_tiling = "off"
    return rows


def weights_hash(pipe) -> str:
    """A hash of the first 4096 values of every parameter: the two halves of the cross-process test must have
    built the same random weights."""
    import hashlib

    h = hashlib.sha256()
    for name, m in sorted(pipe.components.items()):
        if isinstance(m, torch.nn.Module):
            for pname, p in m.named_parameters():
                h.update(f"{name}.{pname}".encode())
                h.update(p.detach().flatten()[:4096].float().cpu().numpy().tobytes())
    return h.hexdigest()


def cross_process(r: Renderer, req: RenderRequest, k: int, xdir: Path, mode: str, whash: str) -> dict[str, Any]:
    """save: K steps, the checkpoint at step k and the final latents to `xdir`. load: K steps again and a resume
    from the saved checkpoint, each compared with the saved final latents."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    stem = xdir / f"{r.family.name}-{req.sampler}"
    out: dict[str, Any] = {"sampler": req.sampler, "steps": req.num_steps, "stop_at": k, "weights_hash": whash}
    state = r.start(req)
    blob = b""
    times: list[float] = []
    while not state.done:
        if state.step == k:
            blob = encode(r.snapshot(state))
        s0 = time.perf_counter()
        state = r.step(state)
        sync(r.device)
        times.append(time.perf_counter() - s0)
    out["step_s_median"] = round(statistics.median(times[1:]), 5)
    if mode == "save":
        stem.with_suffix(".ckpt").write_bytes(blob)
        save_file({"latents": state.latents.detach().cpu().contiguous()}, str(stem) + ".final.safetensors",
                  metadata={"weights_hash": whash})
        return out
    final_path = str(stem) + ".final.safetensors"
    saved_final = load_file(final_path)["latents"]
    with safe_open(final_path, "pt") as fh:
        out["same_weights_as_saver"] = (fh.metadata() or {}).get("weights_hash") == whash
    out["undisturbed_vs_other_process"] = compare(saved_final, state.latents)
    saved_blob = stem.with_suffix(".ckpt").read_bytes()
    ckpt = decode(saved_blob)
    out["resume_as_worker"] = compare(saved_final, run_to_end(r, r.resume(req, ckpt)).latents)
    saved = ckpt.tensors["latents"]
    if saved.dtype != r.dtype:
        again = dataclasses.replace(r.resume(req, decode(saved_blob)), latents=saved.to(r.device))
        out["resume_latents_in_checkpoint_dtype"] = compare(saved_final, run_to_end(r, again).latents)
    return out


def params(pipe) -> dict[str, float]:
    return {name: round(sum(p.numel() for p in m.parameters()) / 1e6, 1)
            for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}


def run_family(family: str, args, device: torch.device, tmp: Path) -> dict[str, Any]:
    shape = (REAL_SHAPES if args.scale == "real" else TINY_SHAPES)[family]
    dtype = _DTYPES[args.dtype or shape.dtype]
    out: dict[str, Any] = {"family": family, "dtype": str(dtype), "shape": dataclasses.asdict(shape)}
    if args.scale == "real":
        out["config"] = REAL[family]
    print(f"== {family}: building ({args.scale}, {dtype})", flush=True)
    sync(device)
    t0 = time.perf_counter()
    torch.manual_seed(1234)
    if args.scale == "real":
        pipe = quietly(lambda: build_real(family, device))
        for m in pipe.components.values():
            if isinstance(m, torch.nn.Module):
                random_init(m)
                quietly(lambda m=m: cast(m, dtype))
    else:
        pipe = quietly(lambda: build_tiny(family))
        for m in pipe.components.values():
            if isinstance(m, torch.nn.Module):
                m.to(device)
                quietly(lambda m=m: cast(m, dtype))
    sync(device)
    out["build_s"] = round(time.perf_counter() - t0, 2)
    out["params_millions"] = params(pipe)
    if device.type == "cuda":
        out["weights_gib"] = round(torch.cuda.memory_allocated(device) / 2**30, 3)
    r = renderer_around(pipe, device, dtype, f"random:{family}:{args.scale}")
    print(f"   built in {out['build_s']} s, params (M) {out['params_millions']}", flush=True)
    whash = weights_hash(pipe) if args.mode in ("save", "load") else ""

    samplers = [r.family.default_sampler]
    if args.samplers == "two" and "dpmpp" in r.family.samplers and "dpmpp" not in samplers:
        samplers.append("dpmpp")  # multistep: previous model outputs in the scheduler's state
    out["resume"] = []
    final = None
    for i, sampler in enumerate(samplers):
        req = RenderRequest(prompt=PROMPT, negative_prompt=NEGATIVE, seed=42, num_steps=args.steps,
                            width=shape.width, height=shape.height, num_frames=shape.frames, fps=shape.fps,
                            sampler=sampler, guidance_scale=shape.guidance)
        try:
            if args.mode in ("save", "load"):
                res, state = cross_process(r, req, args.stop_at, args.xdir, args.mode, whash), None
            else:
                res, state = resume_test(r, req, args.stop_at, args.ckpt_reps, tmp,
                                         with_cost=(i == 0 and args.mode == "perf"))
        except Exception as exc:  # a deterministic-algorithms refusal, an OOM: recorded, the next one runs
            res = {"sampler": sampler, "error": f"{type(exc).__name__}: {exc}"[:2000],
                   "traceback": traceback.format_exc()[-3000:]}
            state = None
        out["resume"].append(res)
        brief = {k: res.get(k) for k in ("step_s_median", "peak_gib_steps")}
        verdicts = {k: (v["bit_identical"], v["max_abs_diff"]) for k, v in res.items()
                    if k.startswith(("resume_", "undisturbed_"))}
        print(f"   {sampler}: {brief} {verdicts} {res.get('error', '')}", flush=True)
        if i == 0:
            final = state
    if args.mode == "perf" and final is not None:
        out["decode"] = decode_figures(r, final)
        first = out["resume"][0]
        step_s, c = first["step_s_median"], first["checkpoint"]["cost_s"]
        interval = optimal_interval_s(c, args.mtbf, args.lo, args.hi)
        whole = [d for d in out["decode"] if d["decode"] == "whole" and "seconds" in d]
        out["figures"] = {
            "step_s": step_s,
            "vae_decode_s": whole[0]["seconds"] if whole else None,
            "checkpoint_bytes": first["checkpoint"]["bytes"],
            "checkpoint_cost_s": c,
            "checkpoint_to_step": round(c / step_s, 5),
            "mtbf_s": args.mtbf,
            "interval_s": round(interval, 2),
            "interval_steps": max(1, round(interval / step_s)),
            "overhead_at_interval": round(c / interval, 6),
            f"video_s_{args.typical_steps}_steps": round(args.typical_steps * step_s + (whole[0]["seconds"] if whole else 0), 2),
        }
        print(f"   figures {out['figures']}", flush=True)
    del r, pipe, final
    free_memory(device)
    return out


def free_memory(device: torch.device) -> None:
    """Give back what the last family held, so the next one is measured on an empty GPU."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def record_family(results: dict[str, Any], family: str, measure: Callable[[], dict[str, Any]],
                  device: torch.device, json_path: Path | None) -> bool:
    """One family's figures into results["families"], or its error (the next family still runs), with its wall
    time; all results so far written to `json_path`, so a crash in a later family keeps them. True if it failed."""
    t0 = time.perf_counter()
    try:
        results["families"][family] = measure()
    except Exception as exc:
        results["families"][family] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                       "traceback": traceback.format_exc()[-3000:]}
        print(f"   {family} FAILED: {exc}", flush=True)
        free_memory(device)
    results["families"][family]["wall_s"] = round(time.perf_counter() - t0, 1)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1))
    return "error" in results["families"][family]


def environment(device: torch.device) -> dict[str, Any]:
    import diffusers
    import transformers

    env = {"cpu": cpu_line(), "torch": torch.__version__, "diffusers": diffusers.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
           "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
           "cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_deterministic": torch.backends.cudnn.deterministic,
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 0 < args.stop_at < args.steps:
        raise SystemExit("--stop-at must lie strictly between 0 and --steps")
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mode in ("save", "load"):
        if args.xdir is None:
            raise SystemExit("--mode save/load needs --xdir")
        args.xdir.mkdir(parents=True, exist_ok=True)
    if args.mode == "det" or args.deterministic:
        if device.type == "cuda" and os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
            raise SystemExit("deterministic algorithms on CUDA need CUBLAS_WORKSPACE_CONFIG=:4096:8 set before the process starts")
        torch.use_deterministic_algorithms(True)
    families = [f for f in args.families.split(",") if f]
    real_params = None
    if args.scale == "tiny":
        check_renderer_attributes(families[0])
        real_params = check_real_configs(families)
    results: dict[str, Any] = {"scale": args.scale, "mode": args.mode, "device": device.type,
                               "environment": environment(device), "steps": args.steps, "stop_at": args.stop_at,
                               "prompt": PROMPT, "negative_prompt": NEGATIVE, "families": {}}
    if real_params:
        results["real_params_millions_on_meta"] = real_params
    print(json.dumps(results["environment"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            record_family(results, family, lambda: run_family(family, args, device, Path(tmp)), device, args.json)
    failed = [f for f, v in results["families"].items()
              if "error" in v or any("error" in x for x in v.get("resume", []))]
    print(f"done; failed: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
