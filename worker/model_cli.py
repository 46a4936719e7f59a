"""`spotreel model tiny DIR [--family F]`: build a tiny random-weight text-to-video model for tests and the demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="models the worker can load")
    msub = model.add_subparsers(dest="model_command", metavar="ACTION")
    msub.required = True
    tiny = msub.add_parser("tiny", help="build a tiny random-weight text-to-video model into DIR (idempotent)")
    tiny.add_argument("dir", type=Path, metavar="DIR", help="target directory (created; must be empty or "
                      "hold the same build)")
    tiny.add_argument("--config", default="tiny", help="tiny (default, seconds per video on a CPU) or "
                      "large (a wider, deeper UNet for benchmarks); unet3d only")
    tiny.add_argument("--family", default="unet3d", choices=("unet3d", "wan", "ltx", "cogvideox"),
                      help="pipeline family: unet3d (TextToVideoSD, default), wan (WanPipeline), ltx "
                      "(LTXPipeline) or cogvideox (CogVideoXPipeline)")
    tiny.set_defaults(func=_tiny)


def _tiny(args: argparse.Namespace, settings: object) -> int:
    from spotreel.worker.model_tiny import CONFIGS, build_tiny_model

    if args.config not in CONFIGS:
        print(f"model tiny: unknown --config {args.config!r}; choose one of {', '.join(sorted(CONFIGS))}",
              file=sys.stderr)
        return 2
    try:
        built = build_tiny_model(args.dir, args.config, args.family)
    except (FileExistsError, NotADirectoryError, PermissionError) as exc:
        print(f"model tiny: {exc}", file=sys.stderr)
        return 1
    print(f"{'built' if built else 'already built'}: {args.dir}")
    return 0
