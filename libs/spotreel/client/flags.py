"""The flags that describe one video, shared by `spotreel submit` and `spotreel schedule create`, each with its
unit, its allowed values and its default in the help text. The limits are the gateway's defaults
(GatewayConfig, SPOTREEL_GATEWAY_*) and the domain's, taken from the same constants the gateway checks with,
so the help cannot drift from what is refused; a deployment that changed a limit says so in its 422."""

from __future__ import annotations

import argparse

from spotreel.api.config import GatewayConfig
from spotreel.api.submission import MAX_SEED, POLICY_DEFAULTS, POLICY_LIMITS, PRIORITY_RANGE
from spotreel.webhooks.filters import DEFAULT_FILTER, FILTERS

# argparse dest → the API's field, for the flags below.
VIDEO_FIELDS = {"model": "model", "gpu_type": "gpu_type", "duration": "duration", "resolution": "resolution",
                "fps": "fps", "seed": "seed", "priority": "priority", "num_steps": "num_steps",
                "callback_url": "callback_url", "timeout": "timeout_seconds", "max_attempts": "max_attempts",
                "backoff_base": "backoff_base_seconds", "backoff_max": "backoff_max_seconds"}


PRIORITY_HELP = (f"the dispatch tier, {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}: queued videos go highest tier "
                 "first across all tenants, and one may preempt a running video of a lower tier after that one ran "
                 "60 s (SPOTREEL_PREEMPT_MIN_RUN_S); the tenant's plan caps the highest it may ask (default "
                 f"{PRIORITY_RANGE[0]})")


def webhook_events(value: str) -> list[str]:
    events = [e.strip() for e in value.split(",") if e.strip()]
    unknown = [e for e in events if e not in FILTERS]
    if not events or unknown:
        raise argparse.ArgumentTypeError(f"{value!r}: a comma-separated list of {', '.join(FILTERS)}")
    return events


def add_video_flags(p: argparse.ArgumentParser) -> None:
    cfg = GatewayConfig()
    lo, hi = PRIORITY_RANGE
    p.add_argument("--model", help=f"model name, one of `spotreel model list` (default {cfg.default_model})")
    p.add_argument("--gpu-type", help=f"GPU type of the pool that renders it, a worker's --pool MODEL@GPU "
                                      f"(default {cfg.default_gpu_type})")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help=f"video length in seconds, above 0 and at most {cfg.max_duration_s:g} (default "
                        f"{cfg.default_duration_s:g}); frames = seconds x fps, moved to the nearest count the "
                        f"model renders")
    p.add_argument("--resolution", metavar="WxH",
                   help=f"WIDTHxHEIGHT in pixels, each side a multiple of {cfg.resolution_multiple} from "
                        f"{cfg.min_side} to {cfg.max_side}, at most {cfg.max_pixels} pixels, and one the model "
                        f"renders (default {cfg.default_resolution})")
    p.add_argument("--fps", type=int, help=f"frames per second, 1 to {cfg.max_fps} (default {cfg.default_fps})")
    p.add_argument("--seed", type=int, help=f"noise seed, 0 to {MAX_SEED} (default: one derived from the video's "
                                            "id, the same on every retry)")
    p.add_argument("--priority", type=int, metavar=f"{lo}-{hi}",
                   help=PRIORITY_HELP)
    p.add_argument("--num-steps", type=int, metavar="N",
                   help=f"denoising steps, 1 to {cfg.max_num_steps} and within the model's range (default "
                        f"{cfg.default_num_steps})")
    p.add_argument("--callback-url", metavar="URL",
                   help="http(s) URL that gets a signed webhook when the video ends (the tenant needs a "
                        "webhook secret: `spotreel tenant webhook-secret`)")
    t_lo, t_hi = POLICY_LIMITS["timeout_seconds"]
    p.add_argument("--timeout", type=int, metavar="SECONDS",
                   help=f"fail the video for good once its rendering time, summed over its attempts, passes "
                        f"this, {t_lo} to {t_hi} seconds (default: no limit)")
    a_lo, a_hi = POLICY_LIMITS["max_attempts"]
    p.add_argument("--max-attempts", type=int, metavar="N",
                   help=f"failed attempts before it is dead-lettered, {a_lo} to {a_hi} (default "
                        f"{POLICY_DEFAULTS['max_attempts']}; preemptions do not count)")
    b_lo, b_hi = POLICY_LIMITS["backoff_base_seconds"]
    p.add_argument("--backoff-base", type=int, metavar="SECONDS",
                   help=f"wait before the first retry, doubling each time, {b_lo} to {b_hi} seconds (default "
                        f"{POLICY_DEFAULTS['backoff_base_seconds']})")
    p.add_argument("--backoff-max", type=int, metavar="SECONDS",
                   help=f"longest wait between retries, {b_lo} to {b_hi} seconds (default "
                        f"{POLICY_DEFAULTS['backoff_max_seconds']}, or the base if that is larger)")


def add_webhook_events_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--webhook-events", type=webhook_events, metavar="LIST",
                   help=f"with --callback-url: which webhooks, comma-separated from {', '.join(FILTERS)} (default "
                        f"{','.join(sorted(DEFAULT_FILTER))})")


# The statuses GET /v1/videos?status= takes (the gateway's public/videos.py STATUSES).
JOB_STATUSES = ("accepted", "scheduled", "waiting", "queued", "leased", "running", "paused", "succeeded", "failed",
                "cancelled", "dead_lettered")


def add_limit_flag(p: argparse.ArgumentParser, what: str) -> None:
    cfg = GatewayConfig()
    p.add_argument("--limit", type=int, default=cfg.default_page_size, metavar="N",
                   help=f"{what} per page, 1 to {cfg.max_page_size} (default {cfg.default_page_size})")
