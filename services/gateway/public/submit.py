"""POST /v1/videos.

Order of work, and why:
1. auth, parse and validate (nothing written yet);
2. admission (rate, in-flight, ETA) and the parents' existence (409 `unknown_parent` naming it): a
   well-formed request the tenant's current videos cannot satisfy (422 is for what the request itself gets
   wrong, and what /openapi.json states);
3. the claim of (tenant, Idempotency-Key) — a lightweight transaction, which also tells a replay (the key
   is held already) from new work: a replay of the same body gets the same job id (and its SubmitJob is
   produced again: harmless, the domain ignores a repeated SubmitJob with the same hash, and it heals a
   first attempt whose write was never acknowledged); another body → 409. Replays are never refused by
   admission and never charged: a refusal looks the key up first (a held key is a replay, answered as
   one), and a replay admitted on the way gets its rate token back. So new work costs no read before its
   claim;
4. an "accepted" placeholder row in jobs_by_id at write timestamp 0 — every projector write is stamped
   with the event version (≥ 1), so the projection always wins whichever lands first — written side by
   side with the SubmitJob, awaited until Kafka acknowledged it (acks=all, idempotent producer);
5. 202. If the SubmitJob was not acknowledged the claim is dropped and the answer is 503: the client
   retries with the same key. If only the placeholder failed, the answer is 503 too but the claim stays,
   so the retry is a replay of the job that is on the log.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiohttp import web

from spotreel.domain import ids
from spotreel.domain.commands import SubmitJob
from spotreel.domain.records import replace
from spotreel.personal.fields import seal_mapping, seal_record
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import Gateway, gateway
from spotreel.services.gateway.deps import Claim, Tenant
from spotreel.api.errors import ApiError
from spotreel.services.gateway.jsonbody import read_object
from spotreel.services.gateway.public.lookup import find, status_of
from spotreel.api.submission import build_submit, check_idempotency_key, normalize
from spotreel.services.gateway.public.views import ACCEPTED


async def submit_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    gw.shed("shed_submission", gw.cfg.shed_submissions_lag_seconds, "submit")
    given = request.headers.get("Idempotency-Key")
    # No key: the request is still accepted once, under a fresh key the answer returns, so the client can
    # retry it safely from then on. Without a key a retried POST would create a second job.
    key = check_idempotency_key(given) if given is not None else "gen-" + uuid.uuid4().hex
    body = normalize(await read_object(request), gw.cfg,
                     allow_private_callbacks=bool(gw.settings.webhook_allow_private))
    answer = await accept(gw, request[TENANT], key, body, fresh_key=given is None)
    headers = {"Location": f"/v1/videos/{answer['job_id']}", "Idempotency-Key": key}
    return web.json_response(answer, status=202, headers=headers)


async def check_parents(gw: Gateway, tenant: Tenant, parents: list[str], known: frozenset[str] = frozenset()):
    """Every parent must be a video of this tenant (projected, or accepted and not projected yet); a child
    of a missing parent would otherwise wait for a job that never comes. `known`: accepted moments ago."""
    async def one(parent: str) -> None:
        try:
            await find(gw.deps, tenant.tenant_id, parent)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise ApiError(409, "unknown_parent", f"parent video {parent} does not exist", field="parents",
                           parent=parent) from None
    await asyncio.gather(*(one(p) for p in parents if p not in known))


NO_SECRET_WARNING = {
    "code": "no_webhook_secret", "field": "callback_url",
    "message": "this tenant has no webhook signing secret, so no webhook is sent (the job's webhook state "
               "ends no_secret) unless one is made before the video ends: spotreel tenant webhook-secret NAME"}


async def accept(gw: Gateway, tenant: Tenant, key: str, body: dict[str, Any], *, admitted: bool = False,
                 known_parents: frozenset[str] = frozenset(), fresh_key: bool = False,
                 webhook_style: str | None = None) -> dict[str, Any]:
    """Claim, admit, write the placeholder and produce the SubmitJob; the 202 body. `admitted`: the caller
    already ran the rate and in-flight checks for this request (a DAG is admitted as a whole). `fresh_key`:
    the key was made for this request just now, so nothing can hold it yet: a refusal is not looked up as a
    possible replay (the claim itself still runs). `webhook_style`: the payload its webhooks carry (None:
    spotreel's; "openai": the OpenAI-compatible surface's, services/webhooks/payload.py)."""
    deps = gw.deps
    now = deps.clock_ms()
    submit = build_submit(tenant.tenant_id, key, body, now, gw.new_id(), gw.cfg)
    pool = ids.pool_key(submit.spec.model, submit.gpu_type)
    plain_hash = submit.request_hash
    params = {**{k: body[k] for k in ("duration", "resolution", "fps", "num_steps", "gpu_type",
                                      "callback_url", "guidance_scale", "negative_prompt", "sampler",
                                      "input_image")
                 if k in body}, "seed": submit.spec.seed}

    async def sealed() -> tuple[SubmitJob, Claim]:
        """The SubmitJob and claim with the personal fields sealed under the job's data key (made now, or the
        one an earlier accept of the same job made), after admission so a refusal stores no key."""
        out, values = submit, params
        if deps.vault is not None:
            sealer = await deps.vault.sealer(submit.job_id, tenant.tenant_id)
            out = seal_record(replace(submit, request_hash=sealer.keyed_hash(plain_hash)), sealer)
            values = seal_mapping(params, sealer)
        return out, Claim(job_id=out.job_id, tenant_id=tenant.tenant_id, idempotency_key=key,
                          request_hash=out.request_hash, accepted_at_ms=now, model=out.spec.model, pool=pool,
                          priority=out.priority, prompt=out.spec.prompt, params=values)

    # New work is admitted first and then claimed; the claim tells a replay (the key held already) from new
    # work without a read before it. A replay is never refused: a refusal looks the key up, and a replay
    # admitted on the way gets its rate token back.
    charged = False  # a rate token taken for this request, to give back if it turns out a replay
    estimate = None
    try:
        gw.admission.check_priority(tenant, submit.priority, report=False)
        if not admitted:
            gw.admission.check_rate(tenant, now, report=False)
            charged = True
            await gw.admission.check_in_flight(tenant, report=False)
        await check_parents(gw, tenant, body["parents"], known_parents)
        estimate = await gw.admission.estimate(pool, tenant, submit.priority)
        gw.admission.check_eta(estimate, report=False)
    except ApiError as refused:
        found = None if fresh_key else await deps.reads.get_claim(submit.job_id)
        if found is None:
            gw.admission.report(refused)  # counted only once it stands: a replay's is not a refusal
            raise
        held, replay = found, True
        submit, _ = await sealed()
    else:
        submit, mine = await sealed()
        held = await deps.reads.claim(mine)
        replay = held is not mine
    if replay and held.request_hash == plain_hash != submit.request_hash:
        # A job accepted before its fields were encrypted: its claim and state hold the plain hash.
        submit = replace(submit, request_hash=plain_hash)
    if replay and charged:
        gw.admission.refund_rate(tenant, now)
    if estimate is None:
        estimate = await gw.admission.estimate(pool, tenant, submit.priority)
    if held.request_hash != submit.request_hash:
        raise ApiError(409, "idempotency_key_reused",
                       "this Idempotency-Key was already used with a different request body",
                       field="Idempotency-Key", job_id=submit.job_id)

    status = ACCEPTED
    placeholder = None
    if replay:
        existing = await deps.reads.get_job(submit.job_id)
        status = status_of(existing) if existing is not None else ACCEPTED
    else:
        # Written side by side with the SubmitJob: at timestamp 0 it loses to every projected write, whichever
        # lands first, and the answer waits for both.
        placeholder = asyncio.ensure_future(deps.reads.write_placeholder(held))
    try:
        if body.get("webhook_events"):
            # Before the SubmitJob: the notifier reads the filter when it reads the JobSubmitted. A replay
            # writes it again (same value: it is part of the request hash); a failed write frees the key.
            await deps.reads.write_webhook_events(submit.job_id, body["webhook_events"])
        if webhook_style is not None and body["callback_url"]:
            await deps.reads.write_webhook_style(submit.job_id, webhook_style)
        await deps.commands.send(submit)
    except Exception:
        if placeholder is not None:
            await asyncio.gather(placeholder, return_exceptions=True)
        if not replay:
            await deps.reads.drop_claim(held)
        raise
    if placeholder is not None:
        # The SubmitJob is on the log: a failed placeholder answers 503 but keeps the claim, so the client's
        # retry with the same key is a replay of the job that exists.
        await placeholder
    gw.metrics.commands.labels("SubmitJob").inc()
    if not replay:
        gw.admission.counted(tenant.tenant_id)
    answer = {"job_id": submit.job_id, "status": status, "idempotency_key": key, "replayed": replay,
              "queue_position": estimate.queue_position, "estimated_wait_seconds": estimate.wait_seconds}
    if estimate.wait_seconds is None:
        answer["estimate_unavailable_reason"] = estimate.reason
    if body["callback_url"] and tenant.webhook_secret_set is False:
        # Accepted (a secret made now still signs this job's webhooks), but said, not left to be found out.
        answer["warnings"] = [NO_SECRET_WARNING]
    return answer
