"""Finding a tenant's job: the projected row, else the gateway's claim (accepted, not yet projected).

A job of another tenant, or a placeholder whose claim is gone (its SubmitJob was never acknowledged),
is not found: 404, never 403, so ids cannot be probed across tenants.
"""

from __future__ import annotations

from aiohttp import web

from spotreel.services.gateway.deps import Claim, Deps
from spotreel.api.errors import ApiError, not_found
from spotreel.api.submission import JOB_ID
from spotreel.services.gateway.public.views import ACCEPTED
from spotreel.readmodel.jobs import JobView


def job_id_of(request: web.Request) -> str:
    job_id = request.match_info["id"]
    if not JOB_ID.fullmatch(job_id):
        raise not_found()
    return job_id


async def find(deps: Deps, tenant: str, job_id: str, *, erased_too: bool = False) -> JobView | Claim:
    """The tenant's job (its row, or its claim before the projection); 404 for another tenant's or none, 410
    for an erased one (unless `erased_too`: the erasure itself, which may be repeated)."""
    job = await deps.reads.get_job(job_id)
    if job is not None and job.status != ACCEPTED:
        if job.tenant_id != tenant:
            raise not_found()
        if job.erased_at_ms is not None and not erased_too:
            raise ApiError(410, "erased", "this video was erased: its prompt, video and checkpoints are gone",
                           erased_at_ms=job.erased_at_ms)
        return job
    claim = await deps.reads.get_claim(job_id)
    if claim is None or claim.tenant_id != tenant:
        raise not_found()
    return claim


def status_of(found: JobView | Claim) -> str:
    return found.status if isinstance(found, JobView) else ACCEPTED


def conflict(message: str, status: str) -> ApiError:
    return ApiError(409, "invalid_state", message, video_status=status)
