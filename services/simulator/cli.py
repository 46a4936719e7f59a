"""`spotreel simulate`: a fleet of simulated GPU workers against private, real spotreel services."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spotreel.config.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulate a spot GPU fleet against real services and print figures",
                       description="Starts a private scheduler, projector and gateway (own topics, keyspace, "
                                   "ports) on the running Kafka and Cassandra, ramps simulated workers through "
                                   "the worker API, submits jobs through the public API, then judges the "
                                   "run from its events.")
    a = p.add_argument
    a("--workers", default="250", help="fleet size per stage, e.g. 250,500,1000,2000,4000 (a ramp)")
    a("--stage-seconds", type=float, default=60.0, help="seconds per stage")
    a("--drain-seconds", type=float, default=120.0, help="after the last stage, wait this long for jobs to end")
    a("--rate", default="2", help="submissions per second (Poisson, all tenants); several, one per stage of "
                                   "--workers, grow the demand with the fleet")
    a("--tenants", default="acme:5,globex:3,initech:2", help="tenant names and shares of the submissions")
    a("--tiers", default="0:6,5:3,9:1", help="priority tiers (0..9) and their shares")
    a("--steps", type=int, default=20, help="denoising steps per job")
    a("--step-seconds", type=float, default=1.0, help="GPU seconds per step")
    a("--checkpoint-seconds", type=float, default=0.5, help="checkpoint cost C")
    a("--checkpoint-policy", default="adaptive", help="none | fixed:SECONDS | adaptive (sqrt(2*C*MTBF))")
    a("--mtbf", default="600", help="mean seconds between preemptions per machine (0: none); several, one per "
                                     "stage of --workers, change the preemption rate stage by stage")
    a("--mtbf-prior", type=float, default=0.0,
      help="the workers' prior MTBF (their --mtbf; default: the first stage's); the pool's measured lease losses "
           "move it")
    a("--mtbf-prior-losses", type=float, default=1.0, help="the prior's weight in losses (worker's option)")
    a("--notice-share", type=float, default=0.5, help="share of preemptions that come with notice")
    a("--cold-start", type=float, default=5.0, help="seconds from a new machine to its first request")
    a("--heartbeat-seconds", type=float, default=10.0)
    a("--progress-seconds", type=float, default=5.0)
    a("--lease-ttl", type=float, default=30.0, help="the lease TTL the workers ask for, in seconds (the gateway's "
      "and the worker's default: 30); a heartbeat period well under a third of it")
    a("--price", type=float, default=2.50, help="USD per GPU-hour for the cost estimate")
    a("--partitions", type=int, default=6, help="partitions of the private topics")
    a("--seed", type=int, default=1)
    a("--stall-scheduler", default="", metavar="AT:SECONDS",
      help="freeze the private scheduler (SIGSTOP) for SECONDS, AT seconds after the start: the control plane "
           "falls behind while the fleet keeps renewing")
    a("--stall-gateway", default="", metavar="AT:SECONDS",
      help="freeze the private gateway (SIGSTOP) instead: the HTTP workers' renewals wait in its sockets")
    a("--transport", default="http", choices=("http", "kafka"),
      help="how the simulated workers reach the scheduler: the gateway's worker API (http) or Kafka directly "
           "(kafka, as internal pools do); submissions always use the public HTTP API")
    a("--replicas", default="", metavar="SERVICE=N,...",
      help="several processes of a private service, as `infra up --replicas` (e.g. gateway=2: two gateways "
           "behind HAProxy, which must be installed); default one of each")
    a("--out", type=Path, default=None, help="write the figures as JSON here")
    a("--keep", action="store_true", help="keep the private topics and keyspace (for inspection)")
    p.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.fleetsim.config import (SimConfig, parse_mtbf, parse_policy, parse_ramp, parse_rate,
                                                       parse_shares, parse_stall)
    from spotreel.services.simulator.run import simulate
    from spotreel.services.simulator.stack import parse_replicas

    try:
        policy, fixed = parse_policy(args.checkpoint_policy)
        mtbf, mtbf_by_stage = parse_mtbf(args.mtbf)
        rate, rate_by_stage = parse_rate(args.rate)
        cfg = SimConfig(
            workers=parse_ramp(args.workers), stage_s=args.stage_seconds, drain_s=args.drain_seconds,
            submit_rate=rate, rate_by_stage=rate_by_stage, tenants=parse_shares(args.tenants, "--tenants"),
            tiers=parse_shares(args.tiers, "--tiers", key=int), steps=args.steps, step_s=args.step_seconds,
            checkpoint_cost_s=args.checkpoint_seconds, policy=policy, fixed_interval_s=fixed, mtbf_s=mtbf,
            mtbf_by_stage_s=mtbf_by_stage, mtbf_prior_s=args.mtbf_prior, mtbf_prior_losses=args.mtbf_prior_losses,
            notice_share=args.notice_share, cold_start_s=args.cold_start, heartbeat_s=args.heartbeat_seconds,
            progress_s=args.progress_seconds, lease_ttl_s=args.lease_ttl, price_per_gpu_hour=args.price, seed=args.seed,
            transport=args.transport, **parse_stall(args.stall_scheduler),
            **parse_stall(args.stall_gateway, "gateway"))
        if args.stall_scheduler and args.stall_gateway:
            raise ValueError("--stall-scheduler and --stall-gateway: one stall at a time")
        if args.partitions < 1:
            raise ValueError("--partitions must be at least 1")
        counts = parse_replicas(args.replicas)
    except ValueError as exc:
        print(f"spotreel simulate: {exc}", file=sys.stderr)
        return 2
    from spotreel.runtime import gctune

    gctune.install(settings.gc_threshold)
    report = simulate(cfg, settings, args.out, partitions=args.partitions, keep=args.keep, replica_counts=counts)
    return 1 if report["lost"] or report["duplicated"] else 0
