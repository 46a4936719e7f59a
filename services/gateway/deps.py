"""What the gateway needs from the outside world, as small async interfaces.

`create_app` takes them injected: production wires Kafka and Cassandra (`wiring.py`), unit tests pass the
fakes of `fakes.py`. The read-side records are the read models' own dataclasses (libs/spotreel/readmodel/,
shared with the projector), so the gateway and the projector cannot drift on what a job row means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from spotreel.dispatch.listener import DispatchUnavailable
from spotreel.readmodel.jobs import AttemptView, HistoryEntry, JobListItem, JobPage, JobView
from spotreel.readmodel.schedules import OccurrencePage, SchedulePage, ScheduleView
from spotreel.readmodel.webhooks import JobWebhookState


# The command was not acknowledged by Kafka (definitely not written, or unknown), or the dispatch consumer
# could not start: answer 503. The dispatch library (spotreel.dispatch) raises it.
SinkUnavailable = DispatchUnavailable


@dataclass(frozen=True)
class Tenant:
    tenant_id: str
    rate_per_minute: int | None = None
    max_in_flight: int | None = None
    disabled: bool = False
    # The highest priority its plan allows (domain/plans.py); None: every tier.
    max_priority: int | None = None
    plan: str | None = None
    # Whether the tenant has a webhook signing secret (the notifier sends nothing without one); None: not
    # known (fakes), so nothing is said about it.
    webhook_secret_set: bool | None = None


@dataclass(frozen=True)
class Claim:
    """The gateway's record of an idempotency key: which request body it was first used with.

    Written with a lightweight transaction before the SubmitJob is produced, so of two concurrent requests
    with the same key and different bodies exactly one is produced and the other gets 409 at once."""

    job_id: str
    tenant_id: str
    idempotency_key: str
    request_hash: str
    accepted_at_ms: int
    model: str = ""
    pool: str = ""
    priority: int = 0
    prompt: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolLoad:
    queued: int
    workers_active: int | None
    workers_idle: int | None
    mean_generation_seconds: float | None
    # Of workers_idle, those with the pool's model loaded (the others switch models first); None: unknown.
    workers_idle_warm: int | None = None


class CommandSink(Protocol):
    async def send(self, command: Any) -> None:
        """Return only once Kafka acknowledged the write (acks=all); raise SinkUnavailable otherwise."""

    def send_nowait(self, command: Any) -> Awaitable[None]:
        """Hand the command to the producer before returning (ordered ahead of anything sent later) without
        waiting; what it returns settles with the ack or SinkUnavailable."""


class ReadStore(Protocol):
    async def get_job(self, job_id: str) -> JobView | None: ...
    async def list_jobs(self, tenant: str, status: str | None, limit: int, page_state: bytes | None) -> JobPage: ...
    async def list_jobs_from(self, tenant: str, after: tuple[int, str] | None, ascending: bool,
                             limit: int) -> list[JobListItem]:
        """Up to `limit` jobs after the one at `after` (created_at ms, job id): newest first, or oldest first."""
    async def mark_deleted(self, job_id: str, at_ms: int) -> None:
        """Record the video deleted (jobs_by_id.deleted_at, migration 0011)."""
    async def forget_claim_text(self, job_id: str) -> None:
        """Drop the prompt and params of the job's claim (an erasure); its key and hash stay."""
    async def job_events(self, job_id: str) -> list[HistoryEntry]: ...
    async def job_attempts(self, job_id: str) -> list[AttemptView]: ...
    async def pool_load(self, pool: str) -> PoolLoad | None: ...
    async def unfinished_jobs(self, tenant: str) -> int: ...
    async def claim(self, claim: Claim) -> Claim:
        """Insert if absent; return the claim that holds the key now: the given object itself when this call
        inserted it, else the older claim (so `is` tells new work from a replay, whatever the clock)."""
    async def get_claim(self, job_id: str) -> Claim | None: ...
    async def drop_claim(self, claim: Claim) -> None: ...
    async def write_placeholder(self, claim: Claim) -> None:
        """An "accepted" jobs_by_id row that every projector write outranks."""
    async def write_webhook_events(self, job_id: str, events: list[str]) -> None:
        """The job's webhook event filter, where the notifier reads it (webhook_subscriptions.events)."""
    async def write_webhook_style(self, job_id: str, style: str) -> None:
        """The payload style of the job's webhooks (webhook_subscriptions.payload_style, migration 0011)."""
    async def webhook_state(self, job_id: str) -> JobWebhookState | None:
        """The webhook notifier's outcome for the job (services/webhooks/store.py); None: no row yet."""
    async def get_schedule(self, schedule_id: str) -> ScheduleView | None: ...
    async def list_schedules(self, tenant: str, limit: int, page_state: bytes | None) -> SchedulePage: ...
    async def schedule_occurrences(self, schedule_id: str, limit: int, page_state: bytes | None) -> OccurrencePage: ...


class AuthStore(Protocol):
    async def tenant_for_key_hash(self, key_hash: str) -> Tenant | None: ...
    async def worker_key_name(self, key_hash: str) -> str | None:
        """The name of a live worker key (api_keys.kind = 'worker'), else None."""


@dataclass
class Deps:
    commands: CommandSink
    reads: ReadStore
    auth: AuthStore
    clock_ms: Callable[[], int]
    # object key -> presigned GET URL of the artifacts bucket; None: /content answers 503.
    presign: Callable[[str], str] | None = None
    new_id: Callable[[], str] | None = None
    # The shared dispatch/verdict consumer (spotreel.dispatch.aio.AsyncDispatch); None: /internal answers 503.
    work: Any = None
    # Pool load for the ETA (poolview.KafkaPoolStats: `async load(pool) -> PoolLoad | None`); None: the
    # read store's pool_load answers instead.
    pools: Any = None
    # Tenants' GPU-seconds (usage.KafkaTenantUsage: `async usage(tenant) -> dict`); None: /v1/usage is 503.
    usage: Any = None
    # Input images (image_store.S3ImageStore: `async put(ref, data) -> bool`); None: an image-to-video
    # request answers 503.
    images: Any = None
    # The personal-data vault (spotreel.personal.vault.Vault): seals a submission's personal fields, opens them
    # for the views and the worker's lease, erases them. None: encryption off (fields are plain text).
    vault: Any = None
    # job id -> how many of its objects were deleted (spotreel.personal.objects); None: erasure leaves S3 alone.
    erase_objects: Callable[[str], int] | None = None


class StoreUnavailable(Exception):
    """Cassandra did not answer: the request cannot be judged, answer 503."""
