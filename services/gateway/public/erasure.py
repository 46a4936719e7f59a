"""DELETE /v1/videos/{id} (and the OpenAI surface's delete): erase a video and its personal data.

Order, and why:
1. the job's data key is deleted (crypto-shredding): from that moment its prompt, negative prompt and
   callback URL, sealed in every copy of the log, its table state and read models, open nowhere;
2. its objects are deleted (video, checkpoints; thumbnails are made from the video, never stored);
3. its claim row's sealed fields are dropped;
4. EraseJob goes to the scheduler, which cancels the job if it still runs and records JobErased (when, by
   whom); the projector marks the job erased and empties its rows' personal columns, the janitor deletes
   what a still-running worker uploads before it learns of the cancel.
Every step is idempotent, so a client (or operator) repeats the whole request after any failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from spotreel.domain import commands as cmd
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import Gateway, gateway
from spotreel.services.gateway.public.lookup import find, job_id_of


async def erase_job(gw: Gateway, tenant_id: str, job_id: str, by: str, reason: str = "user") -> dict[str, Any]:
    deps = gw.deps
    if deps.vault is not None:
        await deps.vault.erase(job_id, tenant_id)
    deleted = 0
    if deps.erase_objects is not None:
        deleted = await asyncio.to_thread(deps.erase_objects, job_id)
    await deps.reads.forget_claim_text(job_id)
    command = cmd.EraseJob(gw.new_id(), job_id, by=by, reason=reason)
    await deps.commands.send(command)
    gw.metrics.commands.labels("EraseJob").inc()
    return {"job_id": job_id, "erased": True, "command_id": command.command_id, "objects_deleted": deleted}


async def erase_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    tenant = request[TENANT].tenant_id
    job_id = job_id_of(request)
    await find(gw.deps, tenant, job_id, erased_too=True)  # 404 for another tenant's video or none
    return web.json_response(await erase_job(gw, tenant, job_id, by=f"tenant:{tenant}"), status=202)
