"""`spotreel capacity`: keep a pool's fleet sized to its queue (floor, ceiling, warm idle buffer, cooldowns)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from typing import Any

from spotreel.config import knobs
from spotreel.config.settings import Settings
from spotreel.model_registry import DEFAULT_POOL

# Simulated workers "complete" jobs without rendering anything, so they get a pool of their own by default:
# pointed at the default pool they would answer real jobs with videos that do not exist.
SIM_POOL = "sim-t2v@sim-gpu"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capacity", help="add and drain workers of a pool from its queue and statistics",
                       description="Reads the pool's statistics from the scheduler and which workers hold a "
                                   "lease from the workers read model, and asks a provider to add workers or "
                                   "drain idle ones. Prints one JSON line per action.")
    a = p.add_argument
    a("--pool", default=None, help=f"MODEL@GPU_TYPE (default: {DEFAULT_POOL}, where jobs submitted with the "
                                   f"gateway's defaults go; {SIM_POOL} with --provider simulated)")
    a("--provider", choices=["local", "simulated", "ec2"], default="local",
      help="local: real `spotreel worker` processes on this machine; simulated: the fleet simulator's workers "
           "inside this process (no rendering), against a gateway; ec2: EC2 spot instances (EC2 Fleet, boto3) "
           "that boot `spotreel worker` (services/capacity/README.md)")
    a("--floor", type=int, default=0, help="never fewer workers than this (default 0)")
    a("--ceiling", type=int, default=2, help="never more workers than this (default 2)")
    a("--idle-buffer", type=int, default=1, help="warm idle workers kept beyond the demand (default 1)")
    a("--target-wait", type=float, default=120.0, help="seconds a queued job may wait (default 120)")
    a("--max-step-up", type=int, default=8, help="most workers added in one decision (default 8)")
    a("--up-cooldown", type=float, default=5.0, help="seconds between two scale-ups (default 5)")
    a("--down-cooldown", type=float, default=60.0,
      help="seconds after any scale action before idle workers are drained (default 60)")
    a("--cold-start", type=float, default=60.0,
      help="seconds a new worker may take to load its model before it counts as idle; also the horizon of "
           "the preemption spares (busy workers expected to be lost in that time at the pool's measured "
           "lease-loss rate are replaced ahead; default 60)")
    a("--interval", type=float, default=2.0, help="seconds between decisions (default 2)")
    a("--metrics-port", type=int, default=0, help="serve Prometheus metrics on 127.0.0.1:PORT (0: off)")

    local = p.add_argument_group("--provider local")
    local.add_argument("--worker-threads", type=int, default=1,
                       help="torch CPU threads per worker (default 1: the workers share this machine's cores)")
    local.add_argument("--worker-argv", nargs="+", default=None,
                       help="command that starts one worker instead of `spotreel worker --pool {pool} "
                            "--worker-id {worker_id} --threads {threads}`; those three are filled in, and "
                            "{metrics_port} (0 without --worker-metrics)")
    local.add_argument("--worker-metrics", action="store_true",
                       help="start each worker with --metrics-port on a free port: it serves Prometheus metrics "
                            "and announces itself to the local Prometheus (monitoring/README.md)")

    sim = p.add_argument_group("--provider simulated")
    sim.add_argument("--gateway-url", default=None,
                     help="gateway the simulated or EC2 workers talk to (default: SPOTREEL_WORKER_GATEWAY_URL, "
                          "else this stack's gateway)")
    sim.add_argument("--worker-key", default=None,
                     help="their worker key (default: SPOTREEL_WORKER_KEY, else the local stack's dev key)")
    sim.add_argument("--sim-cold-start", type=float, default=5.0,
                     help="seconds from a new machine to its first request (default 5)")
    sim.add_argument("--sim-step-seconds", type=float, default=1.0, help="seconds per denoising step (default 1)")
    sim.add_argument("--sim-mtbf", type=float, default=600.0,
                     help="mean seconds a machine lives before it is preempted, exponential (0: never; default 600)")
    sim.add_argument("--sim-notice-share", type=float, default=0.5,
                     help="share of preemptions announced ahead (default 0.5); the rest vanish")
    sim.add_argument("--sim-notice-seconds", type=float, default=30.0,
                     help="how long before the end a notice comes (default 30)")
    sim.add_argument("--sim-checkpoint-seconds", type=float, default=0.5, help="checkpoint cost (default 0.5)")
    sim.add_argument("--sim-checkpoint-policy", default="adaptive",
                     help="none | fixed:SECONDS | adaptive (sqrt(2*cost*MTBF)); default adaptive")
    sim.add_argument("--sim-lease-wait", type=float, default=5.0,
                     help="long-poll seconds per lease request; an idle drained worker ends within it (default 5)")
    sim.add_argument("--sim-seed", type=int, default=1, help="seed of the lifetimes and notices (default 1)")
    _ec2_options(p)
    knobs.from_environment(p, "SPOTREEL_CAPACITY_")


def _ec2_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--provider ec2").add_argument
    g("--ec2-region", default="us-east-1", help="AWS region of the pool's instances (default us-east-1)")
    g("--ec2-endpoint", default="", help="EC2 and SSM endpoint URL (default: AWS's own for the region; a "
                                         "moto server in the tests)")
    g("--ec2-launch-template", default="", help="launch template (name, or id lt-...) with the image, instance "
                                                "profile, security groups and IMDSv2; its $Default version is used")
    g("--ec2-instance-types", default="", help="comma-separated instance types the pool's model fits on, e.g. "
                                               "g6.xlarge,g5.xlarge")
    g("--ec2-subnets", default="", help="comma-separated subnet ids, one per availability zone to launch in")
    g("--ec2-deployment", default="", help="value of the spotreel:deployment tag (default: SPOTREEL_TOPIC_PREFIX)")
    g("--ec2-on-demand-share", type=float, default=0.0,
      help="on-demand may fill what spot could not launch, up to this share of the fleet (default 0: spot only)")
    g("--ec2-on-demand-max", type=int, default=0, help="and up to this many on-demand instances (default 0)")
    g("--ec2-video-seconds", type=float, default=60.0,
      help="GPU seconds of one video for the cost per video until the pool's mean run time is measured "
           "(default 60)")
    g("--ec2-redo-seconds", type=float, default=60.0,
      help="seconds of work redone per interruption, for the cost per video (default 60)")
    g("--ec2-price-tolerance", type=float, default=0.2,
      help="placements whose expected cost per video is within this share of the best are offered to EC2 Fleet, "
           "which picks among them by capacity (default 0.2)")
    g("--ec2-backoff-base", type=float, default=10.0,
      help="seconds a placement sits out after a capacity, limit or throttling error, doubling per error in a "
           "row (default 10)")
    g("--ec2-backoff-cap", type=float, default=600.0, help="longest such backoff in seconds (default 600)")
    g("--ec2-drain-timeout", type=float, default=150.0,
      help="seconds from a drain to the termination when the instance has not reported its worker stopped "
           "(default 150)")
    g("--ec2-worker-command", default="spotreel", help="the spotreel executable on the image (default spotreel)")
    g("--ec2-worker-env", action="append", default=None, metavar="NAME=VALUE",
      help="a plain setting for the workers, written into the user data (repeatable; secrets are refused)")
    g("--ec2-secret", action="append", default=None, metavar="NAME=PARAMETER",
      help="a secret setting the instance reads at boot from this SSM parameter (SecureString) with its instance "
           "profile (repeatable; default SPOTREEL_WORKER_KEY=/spotreel/<deployment>/worker-key)")
    g("--ec2-metadata-endpoint", default="",
      help="instance metadata address the instances use (default: EC2's own; the tests' metadata mock)")
    p.set_defaults(func=_run)


def _fail(message: str) -> int:
    print(f"spotreel capacity: {message}", file=sys.stderr)
    return 2


def _sim_config(args: argparse.Namespace) -> Any:
    from spotreel.fleetsim.config import SimConfig, parse_policy

    checks = [(args.sim_cold_start >= 0, "--sim-cold-start must not be negative"),
              (args.sim_step_seconds > 0, "--sim-step-seconds must be positive"),
              (args.sim_mtbf >= 0, "--sim-mtbf must not be negative (0: no preemptions)"),
              (0 <= args.sim_notice_share <= 1, "--sim-notice-share must be within [0, 1]"),
              (args.sim_notice_seconds >= 0, "--sim-notice-seconds must not be negative"),
              (args.sim_checkpoint_seconds >= 0, "--sim-checkpoint-seconds must not be negative"),
              (0 < args.sim_lease_wait <= 60, "--sim-lease-wait must be within (0, 60]")]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    try:
        policy, fixed = parse_policy(args.sim_checkpoint_policy)
    except ValueError:
        raise ValueError("--sim-checkpoint-policy: use none, adaptive or fixed:SECONDS, "
                         f"got {args.sim_checkpoint_policy!r}") from None
    return SimConfig(step_s=args.sim_step_seconds, checkpoint_cost_s=args.sim_checkpoint_seconds, policy=policy,
                     fixed_interval_s=fixed, mtbf_s=args.sim_mtbf, notice_share=args.sim_notice_share,
                     cold_start_s=args.sim_cold_start, lease_wait_s=args.sim_lease_wait, seed=args.sim_seed)


def _pairs(items: list[str] | None, what: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{what} takes NAME=VALUE, got {item!r}")
        out.append((name, value))
    return tuple(out)


def _ec2_provider(args: argparse.Namespace, settings: Settings, pool: str, metrics: Any) -> Any:
    from spotreel.services.capacity.ec2_userdata import WorkerLaunch
    from spotreel.services.capacity.provider_ec2 import Ec2PoolConfig, Ec2Provider, ec2_clients

    deployment = args.ec2_deployment or settings.topic_prefix
    cfg = Ec2PoolConfig(
        pool=pool, deployment=deployment, launch_template=args.ec2_launch_template,
        instance_types=tuple(t.strip() for t in args.ec2_instance_types.split(",") if t.strip()),
        subnets=tuple(t.strip() for t in args.ec2_subnets.split(",") if t.strip()), region=args.ec2_region,
        endpoint_url=args.ec2_endpoint, on_demand_share=args.ec2_on_demand_share,
        on_demand_max=args.ec2_on_demand_max, video_s=args.ec2_video_seconds, redo_s=args.ec2_redo_seconds,
        price_tolerance=args.ec2_price_tolerance, backoff_base_s=args.ec2_backoff_base,
        backoff_cap_s=args.ec2_backoff_cap, drain_timeout_s=args.ec2_drain_timeout)
    url = args.gateway_url or settings.worker_gateway_url or settings.gateway_url
    env = [("SPOTREEL_WORKER_GATEWAY_URL", url), ("SPOTREEL_CLOUD_NOTICES", "aws")]
    if args.ec2_metadata_endpoint:
        env.append(("SPOTREEL_METADATA_ENDPOINT", args.ec2_metadata_endpoint))
    env += [kv for kv in _pairs(args.ec2_worker_env, "--ec2-worker-env") if kv[0] not in dict(env)]
    secrets = _pairs(args.ec2_secret, "--ec2-secret") or (("SPOTREEL_WORKER_KEY", f"/spotreel/{deployment}/worker-key"),)
    launch = WorkerLaunch(pool, command=args.ec2_worker_command, env=tuple(env), secrets=secrets,
                          metadata_endpoint=args.ec2_metadata_endpoint)
    ec2, ssm = ec2_clients(cfg)
    return Ec2Provider(cfg, launch, ec2, ssm, metrics=metrics)


def _provider(args: argparse.Namespace, settings: Settings, pool: str, metrics: Any = None) -> Any:
    if args.provider == "ec2":
        return _ec2_provider(args, settings, pool, metrics)
    if args.provider == "simulated":
        from spotreel.platform.seed import DEV_WORKER_KEY
        from spotreel.services.capacity.provider_sim import SimulatedProvider

        url = args.gateway_url or settings.worker_gateway_url or settings.gateway_url
        key = args.worker_key or settings.worker_key or DEV_WORKER_KEY
        return SimulatedProvider(pool, url, key, _sim_config(args), notice_lead_s=args.sim_notice_seconds)
    from spotreel.services.capacity.providers import LocalProvider

    if args.worker_threads < 1:
        raise ValueError("--worker-threads must be at least 1")
    safe = pool.replace("@", "_")
    return LocalProvider(pool, settings.run_dir / "capacity" / safe, settings.logs_dir / "workers",
                         argv=args.worker_argv, threads=args.worker_threads, worker_metrics=args.worker_metrics)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.services.capacity.manager import Manager
    from spotreel.services.capacity.metrics import CapacityMetrics
    from spotreel.services.capacity.policy import CapacityConfig
    from spotreel.services.capacity.stats import PoolStatsReader
    from spotreel.services.capacity.workers import status_lookup

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s capacity %(levelname)s %(message)s")
    pool = args.pool or (SIM_POOL if args.provider == "simulated" else DEFAULT_POOL)
    model, sep, gpu = pool.rpartition("@")
    if not sep or not model or not gpu:
        return _fail(f"--pool must look like MODEL@GPU_TYPE, got {pool!r}")
    if not args.interval > 0 or args.cold_start < 0:
        return _fail("--interval must be positive and --cold-start not negative")
    try:
        cfg = CapacityConfig(floor=args.floor, ceiling=args.ceiling, idle_buffer=args.idle_buffer,
                             target_wait_s=args.target_wait, up_cooldown_s=args.up_cooldown,
                             down_cooldown_s=args.down_cooldown, max_step_up=args.max_step_up,
                             cold_start_s=args.cold_start)
        metrics = CapacityMetrics()
        provider = _provider(args, settings, pool, metrics)
    except ValueError as exc:
        return _fail(str(exc))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps({"at": time.time(), "action": "start", "pool": pool, "provider": args.provider, "floor": cfg.floor,
                      "ceiling": cfg.ceiling, "idle_buffer": cfg.idle_buffer}), flush=True)
    if args.metrics_port:
        try:
            metrics.serve(args.metrics_port, settings.host)
        except OSError as exc:
            provider.close()
            return _fail(f"cannot serve metrics on {settings.host}:{args.metrics_port}: {exc.strerror}")
    stats = PoolStatsReader(settings)
    mgr = None
    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            mgr = Manager(pool, cfg, stats, provider, status_lookup(session), cold_start_s=args.cold_start,
                          metrics=metrics)
            mgr.run(args.interval, stop.is_set)
    finally:
        stats.close()
        left = provider.workers()
        provider.close()
        if mgr is not None:
            print(json.dumps({"at": time.time(), "action": "stop", "pool": pool, "added": mgr.added, "drained": mgr.drained,
                              "preemption_notices": mgr.preempted,
                              "stopped_at_exit": sum(not w.draining for w in left),
                              "draining_at_exit": sum(w.draining for w in left),
                              "provider": provider.summary()}), flush=True)
    return 0
