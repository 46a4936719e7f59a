"""Gateway policy knobs. Kept apart from the shared Settings: only the gateway reads them, and the Kafka client
(spotreel.client.kafka) its submission limits and defaults. This class is their one list: the entrypoint reads each from `SPOTREEL_GATEWAY_<NAME>` when set
(`from_env`, e.g. SPOTREEL_GATEWAY_MAX_PROMPT_CHARS=8000), and tests build variants with
`dataclasses.replace`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

ENV_PREFIX = "SPOTREEL_GATEWAY_"
# Knobs that are not read from SPOTREEL_GATEWAY_<NAME> (the registry is SPOTREEL_MODEL_REGISTRY, in Settings).
NOT_FROM_ENV = frozenset({"models"})


@dataclass(frozen=True)
class GatewayConfig:
    # aiohttp refuses larger bodies with 413 before any handler runs, so a huge prompt costs no parsing.
    max_body_bytes: int = 64 * 1024
    # Largest input image (input_reference of an image-to-video request), in bytes. A create request with an
    # image may be this much bigger than max_body_bytes (a third more again for a base64 data: URL).
    max_image_bytes: int = 8 * 1024 * 1024
    # Most pixels of an input image (width x height), checked before it is decoded.
    max_image_pixels: int = 4096 * 4096
    # Longest side of an input image, in pixels.
    max_image_side: int = 4096
    # Longest prompt (and negative prompt) a submission may carry, in characters.
    max_prompt_chars: int = 4000
    # Longest video a submission may ask for, in seconds.
    max_duration_s: float = 60.0
    # Highest frame rate a submission may ask for.
    max_fps: int = 60
    # Most denoising steps a submission may ask for.
    max_num_steps: int = 500
    # Sizes every diffusers text-to-video model can render: the VAE works in blocks of 8 pixels.
    resolution_multiple: int = 8
    # Shortest side in pixels; 16 keeps tiny test renders (32x24 in the e2e test) possible.
    min_side: int = 16
    # Longest side in pixels.
    max_side: int = 1920
    # Most pixels of a frame: 1080p either way round.
    max_pixels: int = 1920 * 1080
    # Most parents a job of a DAG may wait for.
    max_parents: int = 64
    # Longest delay (delay_seconds) a submission may ask for before its job starts.
    max_delay_s: int = 30 * 24 * 3600
    # The operator's model registry (spotreel.model_registry.ModelRegistry; None: no registry, any model name).
    # create_app loads it from SPOTREEL_MODEL_REGISTRY when the config has none.
    models: Any = None
    # Model of a submission that names none.
    default_model: str = "tiny-t2v"
    # GPU type of a submission that names none ("any": whichever pool serves the model).
    default_gpu_type: str = "any"
    # Resolution (WIDTHxHEIGHT) of a submission that names none.
    default_resolution: str = "256x256"
    # Frame rate of a submission that names none.
    default_fps: int = 8
    # Duration in seconds of a submission that names none.
    default_duration_s: float = 2.0
    # Denoising steps of a submission that names none.
    default_num_steps: int = 20
    # Used when the tenants row has no rate; a per-minute rate becomes a token every 60000/rate ms.
    default_rate_per_minute: int = 600
    # Burst of the submission rate limit when the tenants row has none.
    default_burst: int = 20
    # A tenant's dispatch cap (jobs running at once) when the tenants row has none.
    default_max_in_flight: int = 100
    # A tenant may queue this many times its dispatch cap before admission says no: dispatch limits how
    # many run at once, this limits how far ahead of the workers a tenant can pile work.
    in_flight_queue_factor: int = 10
    # Above this estimated wait the gateway answers 503 instead of accepting work it cannot honour soon.
    max_eta_seconds: int = 6 * 3600
    # What a model switch costs a worker (unload the loaded model, load another), in the ETA of a job that
    # only idle workers with another model loaded can take. An operator's estimate: the worker measures
    # its own (spotreel_worker_model_switch_seconds) but does not report it to the control plane.
    model_switch_seconds: float = 60.0
    # Retry-After (seconds) of the worker API's 503 when this gateway has no connection to the scheduler.
    retry_after_unavailable_s: int = 5
    # How long an API key's lookup is cached, in seconds.
    auth_cache_seconds: float = 30.0
    # How long a tenant's count of jobs in flight is cached for admission, in seconds.
    in_flight_cache_seconds: float = 2.0
    # How long the pools' statistics (queue, workers) are cached for ETAs, in seconds.
    pool_stats_cache_seconds: float = 2.0
    # How often a job's event stream (SSE) polls the read model, in seconds.
    stream_poll_seconds: float = 1.0
    # Longest a job's event stream stays open, in seconds.
    stream_max_seconds: float = 3600.0
    # Lifetime of a presigned video URL, in seconds.
    presign_seconds: int = 900
    # Page size of a listing that asks for none.
    default_page_size: int = 50
    # Largest page size a listing may ask for.
    max_page_size: int = 200
    # Worker API (/internal): a lease long-poll's length when the worker asks for none, in seconds.
    lease_poll_default_seconds: float = 20.0
    # Worker API: the longest lease long-poll a worker may ask for, in seconds.
    lease_poll_max_seconds: float = 60.0
    # Worker API: length of a lease when the worker asks for none.
    lease_ttl_ms: int = 30_000
    # Worker API: the heartbeat cadence workers are told to keep, in seconds.
    heartbeat_seconds: float = 10.0
    # Worker API: the progress-report cadence workers are told to keep, in seconds.
    progress_seconds: float = 5.0
    # A lease whose long-poll had ended when it was granted waits this long for the worker's next poll,
    # then is released as unclaimed (leasedesk.py). Workers poll again at once after a 204.
    unclaimed_lease_hold_seconds: float = 5.0
    # A worker's unanswered RequestWork blocks a new one for this long (then another partition is asked).
    lease_request_stale_seconds: float = 30.0
    # How long a fenced command waits for the scheduler's verdict before answering 202 "pending".
    verdict_seconds: float = 5.0
    # A heartbeat or progress report is answered within this: with its verdict if the scheduler judged it by then,
    # else 202 "pending"; its verdict is watched for up to verdict_seconds and told on the holder's next renewal.
    renewal_answer_seconds: float = 1.0
    # A renewal verdict slower than this (or none in time) adds `renew_in_seconds` (a third of a TTL) to the answer:
    # the holder spaces out its renewals while the control plane is behind (domain.leases.renew_in_s).
    slow_verdict_seconds: float = 1.0
    # Worker API: heartbeats, progress reports and idle workers' lease requests are held up to this long (ms) per
    # commands partition and sent together as one RenewalBatch record (spotreel.dispatch.sender), each judged as
    # if it had come alone; fewer records for the broker and the scheduler at a large fleet's cost of this much
    # more round trip. 0: each alone.
    renewal_batch_ms: float = 50.0
    # A pass over every partition found nothing: wait this long (less when pool stats show work) before the next.
    idle_pass_seconds: float = 1.0
    # Worker API: how often the gateway vouches to every commands partition for the worker requests it took in
    # (GatewayPulse; the scheduler holds lease expiry for a gateway that falls behind). 0: never.
    pulse_seconds: float = 1.0
    # Load shedding by criticality (services/gateway/loopwatch.py): while the gateway runs this many seconds
    # behind (its event loop's lag, its worker requests' age when read, the scheduler's verdicts), idle
    # workers' lease polls are answered 503 `overloaded` with Retry-After before any work (a lease already
    # waiting for the worker is still handed over). Lease holders' commands are never shed. 0: never.
    shed_idle_polls_lag_seconds: float = 2.0
    # The same for new submissions (POST /v1/videos, POST /v1/dags): a client retries with its Idempotency-Key.
    shed_submissions_lag_seconds: float = 5.0
    # A job's retry and time policy where its submission sets none (POST /v1/videos, DAGs, schedules and the
    # Kafka client; domain/retry.py, limits.py). Visible failures allowed before the job is dead-lettered.
    default_max_attempts: int = 5
    # Delay after a job's first failure, doubled per failure (equal jitter), in seconds.
    default_backoff_base_seconds: int = 2
    # Cap of every backoff delay, in seconds.
    default_backoff_max_seconds: int = 300
    # Lost or released leases allowed before a job is dead-lettered (preemption is not failure; this only ends
    # a job that always loses its worker). Not settable per submission.
    default_max_preemptions: int = 50
    # Poison: this many visible failures within default_poison_window_seconds dead-letter a job at once (>= 2).
    default_poison_threshold: int = 3
    # The poison window, in seconds; 0: no poison rule.
    default_poison_window_seconds: int = 60
    # Stuck rule: a lease whose step has not advanced for max(default_stuck_min_seconds, this many x the lease's
    # mean step time) is a visible, retryable failure. 0: off.
    default_stuck_steps: int = 10
    # The stuck rule's floor, in seconds.
    default_stuck_min_seconds: int = 120
    # DELETE /v1/schedules/{id}: how long it waits for the read model to show the schedule deleted (then 200; the
    # schedule's routes answer 404 from then on) before it answers 202 (durable, applied later). 0 = never wait.
    schedule_delete_wait_seconds: float = 5.0


def from_env(env: Mapping[str, str] | None = None) -> GatewayConfig:
    """The defaults above, each replaced by `SPOTREEL_GATEWAY_<NAME>` when that is set: every knob but
    `models`, which comes from SPOTREEL_MODEL_REGISTRY (Settings). A value that is not of the knob's type is
    refused with the variable's name, so a typo stops the gateway at start instead of serving other limits."""
    from spotreel.config import knobs

    changes = knobs.dataclass_overrides(GatewayConfig, ENV_PREFIX, os.environ if env is None else env, NOT_FROM_ENV)
    cfg = replace(GatewayConfig(), **changes)
    problem = job_policy_problem(cfg)
    if problem is not None:
        raise ValueError(f"{ENV_PREFIX}DEFAULT_*: {problem}")
    return cfg


def job_policy_problem(cfg: GatewayConfig) -> str | None:
    """Why the default job policy is not one the domain takes (the limits of a submission), or None."""
    from spotreel.domain import limits

    problem = limits.policy_problem(
        max_attempts=cfg.default_max_attempts, backoff_base_ms=cfg.default_backoff_base_seconds * 1000,
        backoff_max_ms=cfg.default_backoff_max_seconds * 1000, timeout_ms=None, stuck_steps=cfg.default_stuck_steps,
        stuck_min_ms=cfg.default_stuck_min_seconds * 1000)
    if problem is None and cfg.default_max_preemptions < 1:
        problem = "max_preemptions must be >= 1"
    if problem is None and (cfg.default_poison_threshold < 2 or cfg.default_poison_window_seconds < 0):
        problem = "poison_threshold must be >= 2 and poison_window_seconds >= 0"
    return problem
