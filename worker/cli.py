"""`spotreel worker`: one worker process. With no options it joins the local stack's default pool
(tiny-t2v@any) through the gateway, building the tiny model on first use, so `spotreel worker &` next to
`make up` is enough to get videos made."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

from spotreel.config import knobs
from spotreel.model_registry import DEFAULT_POOL
from spotreel.config.settings import Settings
from spotreel.worker.storage import StorageBudgets
from spotreel.worker.stuck import DEFAULT_MIN_S, DEFAULT_STEPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run one worker: lease jobs, render them, checkpoint, upload, complete")
    p.add_argument("--pool", action="append", metavar="MODEL@GPU",
                   help=f"pool to serve (repeatable, one GPU type); default {DEFAULT_POOL}")
    p.add_argument("--worker-id", help="stable id of this worker (default: host-pid-random)")
    p.add_argument("--transport", choices=("http", "kafka"), help="SPOTREEL_WORKER_TRANSPORT; default http")
    p.add_argument("--gateway-url", help="SPOTREEL_WORKER_GATEWAY_URL; default this stack's gateway")
    p.add_argument("--worker-key", help="SPOTREEL_WORKER_KEY; default the local stack's development key")
    p.add_argument("--model-dir", type=Path, help="SPOTREEL_WORKER_MODEL_DIR; default the tiny model under "
                   "the spotreel home (built on first use)")
    p.add_argument("--model", metavar="NAME", action="append",
                   help="a model of the registry (SPOTREEL_MODEL_REGISTRY): its directory, dtype (on cuda) and "
                        "default sampler; --pool defaults to NAME@<its pool> and every --pool must name a --model; "
                        "a lease for a model not given is handed back unused. Repeatable: the first is loaded and "
                        "declared warm, the others are served by switching (unload, load) when the scheduler has "
                        "no job of the loaded one for this worker")
    p.add_argument("--device", help="cpu or cuda (default: cuda when torch sees one)")
    p.add_argument("--sampler", choices=("ddim", "euler_a", "unipc", "dpmpp", "flow_euler"),
                   help="denoising sampler this pool's model version runs with (default: the model family's: "
                   "ddim for unet3d and cogvideox, unipc for wan, flow_euler for ltx)")
    p.add_argument("--guidance-scale", type=float, help="classifier-free guidance of this pool's renders "
                   "(>= 1; default: the registry entry's with --model, else 1.0: off)")
    p.add_argument("--negative-prompt", default="", help="negative prompt of this pool's renders (with guidance)")
    p.add_argument("--vae-tiling", choices=("auto", "on", "off"), default="auto",
                   help="decode in the VAE's tiles and slices, so long or large videos fit in memory: on, off, or "
                        "auto: on a GPU when a whole decode's measured per-family memory estimate exceeds a quarter "
                        "of the GPU's, else above --vae-tile-above output pixels x frames (default %(default)s)")
    p.add_argument("--vae-tile-above", type=int, default=None, metavar="VOXELS",
                   help="width x height x frames above which auto tiles, in place of the GPU memory estimate "
                        "(default: the estimate on a GPU; 832x480x81 on a CPU or for an unmeasured family)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--once", action="store_true", help="exit after one job")
    p.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    p.add_argument("--lease-wait", type=float, default=20.0, help="long-poll seconds per lease request")
    p.add_argument("--lease-ttl-ms", type=int, help="lease length to ask for (default: the control plane's)")
    p.add_argument("--checkpoint-every", type=float, help="fixed checkpoint interval in seconds "
                   "(default: adaptive, sqrt(2*cost*MTBF) bounded by --checkpoint-min/--checkpoint-max)")
    p.add_argument("--mtbf", type=float, default=3600.0,
                   help="prior of the seconds between preemptions: the pool's measured lease-loss rate (pool-stats, "
                        "last hour) moves it, more the more leased time it covers (default %(default)s)")
    p.add_argument("--mtbf-prior-losses", type=float, default=1.0,
                   help="weight of the --mtbf prior, as that many losses seen over as many MTBFs of leased time "
                        "(default %(default)s)")
    p.add_argument("--checkpoint-min", type=float, default=5.0,
                   help="shortest adaptive checkpoint interval in seconds (default %(default)s)")
    p.add_argument("--checkpoint-max", type=float, default=600.0,
                   help="longest adaptive checkpoint interval in seconds (default %(default)s)")
    p.add_argument("--checkpoint-budget", type=float, default=StorageBudgets.checkpoint_s, metavar="S",
                   help="seconds within which S3 may still be tried for a checkpoint (retries with backoff and "
                        "jitter); one not written by then is skipped, counted and logged, and the render goes on "
                        "(default %(default)s)")
    p.add_argument("--storage-budget", type=float, default=StorageBudgets.storage_s, metavar="S",
                   help="the same for what a job cannot do without, the resume checkpoint's read and the video's "
                        "upload: past it the attempt fails as storage_unavailable, which the domain does not count "
                        "toward poison (default %(default)s)")
    p.add_argument("--heartbeat-seconds", type=float, help="default: the control plane's, at most TTL/3")
    p.add_argument("--progress-seconds", type=float, help="default: the control plane's, at most TTL/3")
    p.add_argument("--stuck-steps", type=int, default=DEFAULT_STEPS,
                   help="stuck when no step advanced for max(--stuck-min-seconds, N x the run's mean step time): "
                        "report it, give the lease up, exit 75 if the step stays hung (0: off; default %(default)s)")
    p.add_argument("--stuck-min-seconds", type=float, default=DEFAULT_MIN_S,
                   help="floor of the stuck rule in seconds (default %(default)s)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on 127.0.0.1:PORT (0: off); a local `spotreel infra monitoring` "
                        "Prometheus is told by a file in its targets directory, removed at exit")
    p.add_argument("--grace", type=float, default=20.0,
                   help="seconds between SIGTERM and exit: emergency checkpoint + release must fit; a cloud's "
                        "notice gives the lesser of this and its deadline less --notice-margin")
    p.add_argument("--notice-poll", type=float, default=2.0,
                   help="seconds between two reads of the cloud's preemption notice (SPOTREEL_CLOUD_NOTICES; GCP "
                        "hangs on the value instead; default %(default)s)")
    p.add_argument("--notice-margin", type=float, default=5.0,
                   help="seconds a cloud's notice leaves before its deadline for the process to end "
                        "(default %(default)s)")
    # --transport, --gateway-url, --worker-key and --model-dir are Settings (SPOTREEL_WORKER_TRANSPORT, ...).
    knobs.from_environment(p, "SPOTREEL_WORKER_", skip=("transport", "gateway_url", "worker_key", "model_dir"))
    p.set_defaults(func=_run)


def _fail(message: str) -> int:
    print(f"spotreel worker: {message}", file=sys.stderr)
    return 2


def _pools(raw: list[str] | None) -> tuple[str, tuple[str, ...]] | str:
    pools = raw or [DEFAULT_POOL]
    models, gpus = [], set()
    for pool in pools:
        model, sep, gpu = pool.rpartition("@")
        if not sep or not model or not gpu:
            return f"--pool must look like MODEL@GPU (e.g. {DEFAULT_POOL}), got {pool!r}"
        models.append(model)
        gpus.add(gpu)
    if len(gpus) != 1:
        return f"a worker has one GPU type; --pool values name {sorted(gpus)}"
    return gpus.pop(), tuple(dict.fromkeys(models))


def _check(args: argparse.Namespace) -> str | None:
    if not 0 <= args.metrics_port <= 65535:
        return "--metrics-port must be a TCP port (0: off)"
    for name in ("max_jobs", "threads", "lease_ttl_ms", "vae_tile_above"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    if args.notice_margin < 0:
        return "--notice-margin must be >= 0"
    for name in ("checkpoint_budget", "storage_budget"):
        if not getattr(args, name) >= 0:
            return f"--{name.replace('_', '-')} must be >= 0"
    for name in ("lease_wait", "grace", "notice_poll", "mtbf", "mtbf_prior_losses", "checkpoint_min", "checkpoint_max", "checkpoint_every",
                 "heartbeat_seconds", "progress_seconds"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            return f"--{name.replace('_', '-')} must be > 0"
    if args.checkpoint_min > args.checkpoint_max:
        return "--checkpoint-min must not exceed --checkpoint-max"
    if args.guidance_scale is not None and not args.guidance_scale >= 1.0:
        return "--guidance-scale must be >= 1"
    if args.stuck_steps < 0 or not args.stuck_min_seconds > 0:
        return "--stuck-steps must be >= 0 and --stuck-min-seconds > 0"
    return None


def model_dir(settings: Settings, given: Path | None) -> Path:
    """The model to load; the default tiny model is built on first use (idempotent, deterministic)."""
    if given is not None:
        return given
    if settings.worker_model_dir:
        return Path(settings.worker_model_dir).expanduser()
    from spotreel.worker.model_tiny import build_tiny_model

    target = settings.home / "models" / "tiny-t2v"
    if build_tiny_model(target):
        logging.getLogger("spotreel.worker").info("built the tiny model in %s", target)
    return target


def _run(args: argparse.Namespace, settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s worker %(levelname)s %(name)s %(message)s")
    from spotreel.runtime import tracing

    tracing.setup("worker")
    problem = _check(args)
    args.entries = []
    if args.model:
        from spotreel.model_registry import RegistryError, load, registry_path

        path = registry_path(settings)
        if not path:
            return _fail("--model needs the model registry: set SPOTREEL_MODEL_REGISTRY to its file")
        try:
            registry = load(path)
        except RegistryError as exc:
            return _fail(str(exc))
        names = list(dict.fromkeys(args.model))
        unknown = [n for n in names if n not in registry.models]
        if unknown:
            return _fail(f"--model {unknown[0]!r} is not in the registry; known: {', '.join(registry.names())}")
        args.entries = [registry.models[n] for n in names]
        entry = args.entries[0]
        args.pool = args.pool or [f"{e.name}@{e.pool}" for e in args.entries]
        others = sorted({p.rpartition("@")[0] for p in args.pool} - set(names))
        if others:
            return _fail(f"this worker serves models {names}; --pool names other models {others}")
        if args.model_dir is not None and (len(names) > 1 or args.model_dir != Path(entry.directory)):
            return _fail(f"--model {entry.name} is in {entry.directory} (registry); --model-dir says {args.model_dir}")
        args.model_dir = Path(entry.directory)
        if args.model_dir == settings.home / "models" / "tiny-t2v":
            # The local stack's registry (infra up) names the tiny model: built on first use, as without --model.
            from spotreel.worker.model_tiny import build_tiny_model

            build_tiny_model(args.model_dir)
    pools = _pools(args.pool)
    if isinstance(pools, str) or problem:
        return _fail(problem or str(pools))
    gpu_type, models = pools
    transport_kind = args.transport or settings.worker_transport
    if transport_kind not in ("http", "kafka"):
        return _fail(f"SPOTREEL_WORKER_TRANSPORT must be http or kafka, got {transport_kind!r}")
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    from spotreel.worker.signals import PreemptionNotice

    # Installed before the slow imports and the model load: a SIGTERM then still ends the worker cleanly.
    notice = PreemptionNotice(args.grace)
    notice.install()
    from spotreel.worker.cloud_notices.detect import choose

    try:
        cloud = choose(settings.cloud_notices)
    except ValueError as exc:
        return _fail(str(exc))
    watcher = None
    if cloud is not None:
        from spotreel.worker.cloud_notices.watcher import open_watcher
        from spotreel.worker.report import say

        watcher = open_watcher(cloud, settings.metadata_endpoint, notice, args.notice_poll, args.notice_margin, say)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a stuck worker is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    from spotreel.worker.metrics import WorkerMetrics, announce, withdraw

    metrics = WorkerMetrics()
    announced = None
    if args.metrics_port:
        from spotreel.platform.scrape_targets import targets_dir

        try:
            metrics.serve(args.metrics_port, settings.host)
        except OSError as exc:
            return _fail(f"cannot serve metrics on {settings.host}:{args.metrics_port}: {exc.strerror}")
        announced = announce(targets_dir(settings), worker_id, settings.host, args.metrics_port)
    try:
        return _serve(args, settings, notice, worker_id, gpu_type, models, transport_kind, metrics)
    finally:
        if watcher is not None:
            watcher.finish()  # after the release: Azure may now go ahead with the eviction
        withdraw(announced)


def _serve(args: argparse.Namespace, settings: Settings, notice: Any, worker_id: str, gpu_type: str,
           models: tuple[str, ...], transport_kind: str, metrics: Any) -> int:
    import torch

    from spotreel.platform.s3 import s3_client
    from spotreel.worker.artifacts import ArtifactStore
    from spotreel.worker.checkpoints import CheckpointStore
    from spotreel.worker.hf_logging import quietly
    from spotreel.worker.render_loop import Renderer
    from spotreel.worker.runtime import RuntimeOptions, ServedModel, WorkerRuntime
    from spotreel.worker.transport import WorkerProfile

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tiling = {"vae_tiling": args.vae_tiling, **({"tile_above_voxels": args.vae_tile_above}
                                                  if args.vae_tile_above else {})}

    def loader(directory: Path, entry: Any = None):
        # the registry's dtype on cuda; on a CPU the worker renders in float32
        dtype = getattr(torch, entry.dtype) if device.startswith("cuda") and entry is not None else None
        return lambda: quietly(lambda: Renderer(directory, device=device, dtype=dtype, limits=entry, **tiling,
                                                fingerprint_override=settings.worker_fingerprint_override))

    served = {e.name: ServedModel(e.name, args.sampler or e.sampler,
                                  e.guidance_scale if args.guidance_scale is None else args.guidance_scale,
                                  loader(Path(e.directory), e)) for e in args.entries}
    try:
        renderer = loader(model_dir(settings, args.model_dir), args.entries[0] if args.entries else None)()
    except (FileNotFoundError, FileExistsError, NotADirectoryError, RuntimeError, ValueError) as exc:
        return _fail(f"cannot load the model: {exc}")
    first = args.entries[0] if args.entries else None
    # Warm: the weights actually loaded. A registry worker loaded its first --model; a worker without the
    # registry renders every pool it names with the one directory it loaded, so all of them are warm.
    profile = WorkerProfile(worker_id, gpu_type, models, warm_models=(first.name,) if first else models,
                            fingerprint=renderer.worker_fingerprint(single_model=len(served) <= 1))
    if transport_kind == "kafka":
        from spotreel.worker.transport_kafka import KafkaTransport

        transport = KafkaTransport(settings, profile, open_spec=_spec_opener(settings))
    else:
        from spotreel.platform.seed import DEV_WORKER_KEY
        from spotreel.worker.transport_http import HttpTransport

        transport = HttpTransport(args.gateway_url or settings.worker_gateway_url or settings.gateway_url,
                                  args.worker_key or settings.worker_key or DEV_WORKER_KEY, profile)
    s3 = s3_client(settings)
    options = RuntimeOptions(
        sampler=served[first.name].sampler if first else args.sampler, model=first.name if first else None,
        guidance_scale=served[first.name].guidance_scale if first else (args.guidance_scale or 1.0),
        negative_prompt=args.negative_prompt, lease_wait_s=args.lease_wait, lease_ttl_ms=args.lease_ttl_ms,
        max_jobs=1 if args.once else args.max_jobs, checkpoint_every_s=args.checkpoint_every, mtbf_s=args.mtbf,
        mtbf_prior_losses=args.mtbf_prior_losses,
        checkpoint_min_s=args.checkpoint_min, checkpoint_max_s=args.checkpoint_max,
        heartbeat_s=args.heartbeat_seconds, progress_s=args.progress_seconds, stuck_steps=args.stuck_steps,
        stuck_min_s=args.stuck_min_seconds,
        budgets=StorageBudgets(checkpoint_s=args.checkpoint_budget, storage_s=args.storage_budget))
    runtime = WorkerRuntime(transport, renderer, s3, CheckpointStore(s3, settings.s3_bucket_checkpoints),
                            ArtifactStore(s3, settings.s3_bucket_artifacts), notice, options, metrics=metrics,
                            models=served)
    try:
        return runtime.serve()
    finally:
        transport.close()


def _spec_opener(settings):
    """A platform worker reads its grant off Kafka, sealed: it opens the prompt itself with the keystore and
    KEK (an outside worker gets it opened by the gateway). The keystore is reached at the first sealed grant
    (a grant written with encryption off needs none). None when encryption is off."""
    if not settings.personal_encryption:
        return None
    from spotreel.personal.envelope import is_sealed
    from spotreel.personal.fields import SPEC_PERSONAL, open_spec_sync

    held: list = []

    def vault():
        if not held:
            from spotreel.personal.setup import open_cassandra_vault
            from spotreel.platform.cql import cluster_for

            held.append(open_cassandra_vault(settings, cluster_for(settings).connect(settings.cassandra_keyspace)))
        return held[0]

    def opened(spec):
        if not any(is_sealed(getattr(spec, name)) for name in SPEC_PERSONAL):
            return spec
        return open_spec_sync(spec, vault())
    return opened
