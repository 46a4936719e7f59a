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
    tiny.add_argument("--family", default="unet3d", choices=("unet3d", "wan", "ltx", "ltx-i2v", "cogvideox"),
                      help="pipeline family: unet3d (TextToVideoSD, default), wan (WanPipeline), ltx "
                      "(LTXPipeline), ltx-i2v (LTXImageToVideoPipeline: image-to-video) or cogvideox "
                      "(CogVideoXPipeline)")
    tiny.set_defaults(func=_tiny)
    listing = msub.add_parser("list", help="the models of the registry (SPOTREEL_MODEL_REGISTRY), one per line")
    listing.add_argument("--json", action="store_true", help="one JSON object per model")
    listing.set_defaults(func=_list)


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


def _list(args: argparse.Namespace, settings) -> int:
    import json

    from spotreel.model_registry import RegistryError, load, registry_path

    path = registry_path(settings)
    if not path:
        print("model list: no registry; set SPOTREEL_MODEL_REGISTRY to the registry file (`spotreel infra up` "
              "writes the local stack's to $SPOTREEL_HOME/models.toml)", file=sys.stderr)
        return 1
    try:
        registry = load(path)
    except RegistryError as exc:
        print(f"model list: {exc}", file=sys.stderr)
        return 1
    for name in registry.names():
        e = registry.models[name]
        if args.json:
            print(json.dumps(e.as_dict(), sort_keys=True))
        else:
            sizes = ",".join(e.sizes) if e.sizes else f"{e.side_multiple}n_from_{e.side_min}_to_{e.side_max}"
            print(f"{name}  family={e.family} dtype={e.dtype} pool={e.pool} sizes={sizes} "
                  f"frames={e.frame_rule().replace(' ', '_')} steps={e.steps_min}-{e.steps_max} "
                  f"sampler={e.sampler} samplers={','.join(e.samplers())} guidance={e.guidance_scale:g} "
                  f"dir={e.directory}" + (" takes_image" if e.takes_image else ""))
    return 0
