"""VAE decode alone, whole against tiled + sliced, per model family at real sizes: seconds and peak GPU memory,
to set when the worker's `--vae-tiling auto` tiles (worker/vae_memory.py fits its estimate to these figures).

    .venv/bin/python bench/vae_bench.py --scale tiny                       # CPU: every path, tiny builds
    python3 bench/vae_bench.py --scale real --device cuda --json vae.json  # on a GPU

No denoising: the pipeline is built as bench/family_bench.py builds it (random weights of the real
architecture, constructed on the device, in the dtype a worker serves it in), the latents are the family's
own seeded noise of the request's shape (`Family.latents`), and `Renderer.finish` decodes them with tiling
off and on, the worker's own code path. The decode's memory does not depend on the latents' values. Each
case decodes whole, then tiled; the first case of a family decodes whole twice (the first is a warm-up:
cuDNN picks its algorithms). `extra_gib` = peak minus what was allocated before the decode (the weights).
An OOM is recorded, not fatal. `--budget-s` skips the cases left once the run has taken that long.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_bench import (  # noqa: E402  (bench/ is no package: the script's own folder)
    REAL, TINY_SHAPES, _DTYPES, build_real, build_tiny, cast, environment, free_memory, random_init, record_family,
    renderer_around, sync,
)

from spotreel.worker.hf_logging import quietly  # noqa: E402
from spotreel.worker.render_loop import RenderRequest  # noqa: E402

# family -> dtype and the (width, height, frames) cases, smallest first. Wan 2.1: 832x480 is the 1.3B model's
# size, 1280x720 the 14B's (same VAE), 81 frames its longest; CogVideoX-2B: 720x480 x 49 its card's size,
# 1360x768 CogVideoX 1.5's; LTX-Video 768x512, up to 121 frames (its card: 257 at most); zeroscope 576x320.
REAL_CASES = {
    "wan": ("bfloat16", [(832, 480, 33), (832, 480, 81), (1280, 720, 81)]),
    "cogvideox": ("float16", [(720, 480, 25), (720, 480, 49), (1360, 768, 49)]),
    "unet3d": ("float16", [(576, 320, 24), (576, 320, 48)]),
    "ltx": ("bfloat16", [(768, 512, 33), (768, 512, 121)]),
}
TINY_CASES = {f: (s.dtype, [(s.width, s.height, s.frames), (s.width, s.height, 2 * s.frames - 1)])
              for f, s in TINY_SHAPES.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", choices=("tiny", "real"), default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--families", default=",".join(REAL_CASES))
    p.add_argument("--budget-s", type=float, default=0.0, help="skip the cases left after this many seconds (0: none)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def one_decode(r, state, tiling: str) -> dict[str, Any]:
    dev = r.device
    r.vae_tiling = tiling
    row: dict[str, Any] = {"decode": "tiled" if tiling == "on" else "whole"}
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    try:
        sync(dev)
        t0 = time.perf_counter()
        frames = r.finish(state)
        sync(dev)
        row["seconds"] = round(time.perf_counter() - t0, 4)
        row["frames"] = list(frames.shape)
        del frames
        if dev.type == "cuda":
            peak = torch.cuda.max_memory_allocated(dev)
            row.update(peak_gib=round(peak / 2**30, 3), extra_gib=round((peak - base) / 2**30, 3),
                       reserved_gib=round(torch.cuda.max_memory_reserved(dev) / 2**30, 3))
    except torch.OutOfMemoryError as exc:
        row["error"] = f"OOM: {str(exc)[:300]}"
    r.vae_tiling = "off"
    return row


def run_family(family: str, args, device: torch.device, t_start: float) -> dict[str, Any]:
    dtype_name, cases = (REAL_CASES if args.scale == "real" else TINY_CASES)[family]
    dtype = _DTYPES[dtype_name]
    out: dict[str, Any] = {"family": family, "dtype": str(dtype), "cases": []}
    if args.scale == "real":
        out["vae"] = REAL[family]["vae"]
    torch.manual_seed(1234)
    pipe = quietly(lambda: build_real(family, device) if args.scale == "real" else build_tiny(family))
    for m in pipe.components.values():
        if isinstance(m, torch.nn.Module):
            if args.scale == "real":
                random_init(m)
            else:
                m.to(device)
            quietly(lambda m=m: cast(m, dtype))
    r = renderer_around(pipe, device, dtype, f"random:{family}:{args.scale}")
    if device.type == "cuda":
        out["weights_gib"] = round(torch.cuda.memory_allocated(device) / 2**30, 3)
    for i, (w, h, f) in enumerate(cases):
        case: dict[str, Any] = {"width": w, "height": h, "frames": f, "voxels": w * h * f}
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            case["skipped"] = "over --budget-s"
            out["cases"].append(case)
            continue
        req = RenderRequest(prompt="x", seed=7, num_steps=2, width=w, height=h, num_frames=f, fps=16,
                            sampler=r.family.default_sampler)
        r.family.check(req)
        scheduler = r.family.scheduler(req)
        latents = r.family.latents(req, torch.Generator("cpu").manual_seed(7), scheduler)
        state = types.SimpleNamespace(request=req, latents=latents)  # all finish() reads
        case["latents"] = list(latents.shape)
        rows = [one_decode(r, state, "off")] if i == 0 else []  # warm-up
        rows += [one_decode(r, state, "off"), one_decode(r, state, "on")]
        if i == 0:
            rows[0]["decode"] = "whole (first)"
        case["decodes"] = rows
        out["cases"].append(case)
        print(f"   {family} {w}x{h}x{f}: {rows}", flush=True)
        del state, latents
    del r, pipe
    free_memory(device)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    t_start = time.perf_counter()
    results: dict[str, Any] = {"scale": args.scale, "device": device.type, "environment": environment(device),
                               "families": {}}
    print(json.dumps(results["environment"]), flush=True)
    failed = []
    for family in [f for f in args.families.split(",") if f]:
        if record_family(results, family, lambda: run_family(family, args, device, t_start), device, args.json):
            failed.append(family)
    print(f"done in {time.perf_counter() - t_start:.1f} s; failed: {failed or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
