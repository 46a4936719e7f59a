"""`spotreel demo`: run the main job on the running local stack (`make demo` runs `infra up` first).
Exit 0 only with a verified, decodable MP4 on disk; otherwise one line on stderr and exit 1 (130 on
Ctrl-C)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from spotreel.demo import request as r
from spotreel.demo.errors import DemoError
from spotreel.config.settings import Settings

DEFAULT_TIMEOUT_S = 300.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job end to end: a worker, a prompt in, a verified MP4 out",
                       description="Start one worker, submit a video through the gateway, follow its progress, "
                       "download the MP4, check its sha256 and decode it. Needs the stack up (`make demo` "
                       "starts it).")
    p.add_argument("--prompt", default=r.DEFAULT_PROMPT, help=f"default {r.DEFAULT_PROMPT!r}")
    p.add_argument("--frames", type=int, default=r.DEFAULT_FRAMES, help=f"default {r.DEFAULT_FRAMES}")
    p.add_argument("--fps", type=int, default=r.DEFAULT_FPS, help=f"default {r.DEFAULT_FPS}")
    p.add_argument("--steps", type=int, default=r.DEFAULT_STEPS, help=f"denoising steps, default {r.DEFAULT_STEPS}")
    p.add_argument("--seed", type=int, default=r.DEFAULT_SEED, help=f"default {r.DEFAULT_SEED}")
    p.add_argument("--resolution", default=r.DEFAULT_RESOLUTION, help=f"WxH, default {r.DEFAULT_RESOLUTION}")
    p.add_argument("--pool", help="MODEL@GPU the worker serves and the job goes to (default: one of this "
                   f"run's own, {r.DEFAULT_MODEL}@demo-<id>, so nothing else on a shared stack interferes)")
    p.add_argument("--out", type=Path, default=Path("demo.mp4"), help="where the MP4 goes (default ./demo.mp4)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds from the worker's start to a finished video (default {DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--worker-log", type=Path,
                   help="the worker's log (default $SPOTREEL_HOME/logs/workers/demo-worker.log)")
    p.set_defaults(func=_run)


def _say(line: str) -> None:
    print(line, flush=True)


def _terminate(signum, frame) -> None:
    # `timeout`, a CI runner or `kill` ends the demo like a Ctrl-C: the worker is stopped, the job cancelled.
    raise KeyboardInterrupt


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.demo.run import Demo, DemoOptions, new_token

    token = new_token()
    try:
        if not args.timeout > 0:
            raise DemoError("--timeout must be > 0")
        video = r.VideoRequest(prompt=args.prompt, frames=args.frames, fps=args.fps, steps=args.steps,
                               seed=args.seed, resolution=args.resolution, pool=args.pool or r.private_pool(token))
        options = DemoOptions(video=video, out=args.out, timeout_s=args.timeout, token=token,
                              worker_log=args.worker_log or settings.logs_dir / "workers" / "demo-worker.log")
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)
        Demo(settings, options, _say).run()
        return 0
    except DemoError as exc:
        print(f"spotreel demo: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("spotreel demo: interrupted; the worker was stopped and the job cancelled", file=sys.stderr, flush=True)
        return 130
