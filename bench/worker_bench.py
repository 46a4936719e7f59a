"""Worker benchmark: step time, seconds per video, and what a checkpoint costs against them.

    .venv/bin/python bench/worker_bench.py                      # tiny model, CPU, local S3 (< 60 s)
    .venv/bin/python bench/worker_bench.py --config large       # wider, deeper UNet
    .venv/bin/python bench/worker_bench.py --device cuda --store local --config large
    .venv/bin/python bench/worker_bench.py --model /path/to/zeroscope --device cuda --size 576x320 --frames 24

Figures are reported as ratios against the step time measured in the same run (checkpoint cost / step,
overhead share at the chosen interval), because absolute seconds on a shared 2-core machine move with
whatever else runs. Checkpoint cost C = snapshot (device → host copy) + encode (safetensors + sha256) +
store (S3 PUT, or a local file with fsync, or nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_line  # noqa: E402  (bench/ is no package: the script's own folder)

from spotreel.config.settings import Settings
from spotreel.worker.checkpoints import CheckpointStore, encode
from spotreel.domain.checkpoint_interval import optimal_interval_s
from spotreel.worker.model_tiny import ensure_tiny_model
from spotreel.worker.render_loop import Renderer, RenderRequest
from spotreel.media.video import available_codec, encode_mp4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=("tiny", "large"), default="tiny", help="which built-in model to build")
    p.add_argument("--model", type=Path, help="a diffusers text-to-video directory instead of a built-in one")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", default=None, help="WIDTHxHEIGHT (default 32x32 tiny, 64x64 large, 256x256 --model)")
    p.add_argument("--sampler", choices=("ddim", "euler_a"), default="euler_a")
    p.add_argument("--videos", type=int, default=1, help="videos rendered for the timing")
    p.add_argument("--checkpoints", type=int, default=10, help="checkpoints written for the cost")
    p.add_argument("--store", choices=("s3", "local", "none"), default="s3",
                   help="s3: the local stack's SeaweedFS; local: a file with fsync; none: snapshot + encode only")
    p.add_argument("--mtbf", type=float, default=3600.0, help="pool's mean time between preemptions, seconds")
    p.add_argument("--lo", type=float, default=5.0, help="lower bound of the interval, seconds")
    p.add_argument("--hi", type=float, default=600.0, help="upper bound of the interval, seconds")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads; 1 (default) holds up best on a shared CPU, 0 keeps torch's default")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    return p.parse_args(argv)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def machine(device: torch.device) -> str:
    desc = f"{cpu_line()}, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    if device.type == "cuda":
        desc += f", GPU {torch.cuda.get_device_name(device)}"
    return desc


class LocalStore:
    """A checkpoint 'store' on local disk with fsync: what a node-local spill would cost."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, job_id: str, epoch: int, step: int, ckpt) -> None:
        path = self.root / f"{job_id}-{epoch}-{step}.ckpt"
        with path.open("wb") as fh:
            fh.write(encode(ckpt))
            fh.flush()
            os.fsync(fh.fileno())


def make_store(kind: str, tmp: Path):
    if kind == "none":
        return None
    if kind == "local":
        return LocalStore(tmp)
    import boto3
    from botocore.config import Config

    s = Settings.from_env()
    client = boto3.client("s3", endpoint_url=s.s3_endpoint, aws_access_key_id=s.s3_access_key,
                          aws_secret_access_key=s.s3_secret_key, region_name=s.s3_region,
                          config=Config(s3={"addressing_style": "path"}))
    bucket = f"bench-worker-{os.getpid()}"
    client.create_bucket(Bucket=bucket)
    return CheckpointStore(client, bucket, prefix="bench")


def drop_store(store) -> None:
    if isinstance(store, CheckpointStore):
        store.prune("bench-job", set())
        store._s3.delete_bucket(Bucket=store.bucket)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = args.size or ("256x256" if args.model else {"tiny": "32x32", "large": "64x64"}[args.config])
    width, height = (int(v) for v in size.split("x"))

    t0 = time.perf_counter()
    model_dir = args.model or ensure_tiny_model(Settings.from_env().cache_dir, args.config)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    renderer = Renderer(model_dir, device=args.device)
    load_s = time.perf_counter() - t0
    req = RenderRequest(prompt="a golden fox running on the beach at sunset", seed=42, num_steps=args.steps,
                        width=width, height=height, num_frames=args.frames, fps=8, sampler=args.sampler)

    # Warm-up: first calls allocate and pick kernels.
    warm = renderer.step(renderer.start(req))
    renderer.finish(warm)

    step_times: list[float] = []
    step_cpu: list[float] = []
    video_times: list[float] = []
    decode_times: list[float] = []
    mp4_times: list[float] = []
    for _ in range(args.videos):
        sync(device)
        v0 = time.perf_counter()
        state = renderer.start(req)
        while not state.done:
            s0, p0 = time.perf_counter(), time.process_time()
            state = renderer.step(state)
            sync(device)
            step_times.append(time.perf_counter() - s0)
            step_cpu.append(time.process_time() - p0)
        d0 = time.perf_counter()
        frames = renderer.finish(state)
        decode_times.append(time.perf_counter() - d0)
        e0 = time.perf_counter()
        mp4 = encode_mp4(frames, req.fps)
        mp4_times.append(time.perf_counter() - e0)
        video_times.append(time.perf_counter() - v0)

    # Checkpoint cost on a mid-render state (latents are the same size at every step).
    state = renderer.step(renderer.start(req))
    snap_t, enc_t, store_t, totals, ckpt_cpu = [], [], [], [], []
    size_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(args.store, Path(tmp))
        try:
            for _ in range(args.checkpoints):
                sync(device)
                c0, p0 = time.perf_counter(), time.process_time()
                ckpt = renderer.snapshot(state)
                c1 = time.perf_counter()
                blob = encode(ckpt)
                c2 = time.perf_counter()
                if store is not None:
                    store.save("bench-job", 1, state.step, ckpt)  # encodes again: save = encode + write
                c3 = time.perf_counter()
                size_bytes = len(blob)
                snap_t.append(c1 - c0)
                enc_t.append(c2 - c1)
                # The write alone is save minus its own encode; the cost is what the worker pays once.
                store_t.append(max(0.0, (c3 - c2) - (c2 - c1)) if store is not None else 0.0)
                totals.append(snap_t[-1] + enc_t[-1] + store_t[-1])
                ckpt_cpu.append(time.process_time() - p0)
        finally:
            drop_store(store)

    med = statistics.median
    step_s, cost_s, video_s = med(step_times), med(totals), med(video_times)
    interval_s = optimal_interval_s(cost_s, args.mtbf, args.lo, args.hi)
    figures = {
        "machine": machine(device),
        "device": device.type,
        "model": str(args.model) if args.model else f"built-in {args.config}",
        "settings": f"{width}x{height}, {args.frames} frames, {args.steps} steps, {args.sampler}",
        "codec": available_codec(),
        "model_build_s": round(build_s, 3),
        "model_load_s": round(load_s, 3),
        "step_s_median": round(step_s, 5),
        # CPU seconds hold still when other processes share the cores; wall seconds do not.
        "step_cpu_s_median": round(med(step_cpu), 5),
        "video_s_median": round(video_s, 4),
        "vae_decode_s": round(med(decode_times), 4),
        "mp4_encode_s": round(med(mp4_times), 4),
        "mp4_bytes": len(mp4),
        "checkpoint_bytes": size_bytes,
        "checkpoint_store": args.store,
        "checkpoint_snapshot_s": round(med(snap_t), 6),
        "checkpoint_encode_s": round(med(enc_t), 6),
        "checkpoint_store_s": round(med(store_t), 6),
        "checkpoint_cost_s": round(cost_s, 6),
        "ratio_checkpoint_to_step": round(cost_s / step_s, 4),
        "checkpoint_cpu_s_median": round(med(ckpt_cpu), 6),
        "ratio_checkpoint_cpu_to_step_cpu": round(med(ckpt_cpu) / med(step_cpu), 4),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "mtbf_s": args.mtbf,
        "interval_s": round(interval_s, 2),
        "interval_steps": max(1, round(interval_s / step_s)),
        "overhead_at_interval": round(cost_s / interval_s, 5),
        "overhead_every_step": round(cost_s / step_s, 4),
        "overhead_share_of_video_one_ckpt": round(cost_s / video_s, 4),
    }
    width_col = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width_col}}  {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
