"""POST /v1/dags: several videos with dependencies among them, accepted as one request.

Body: {"nodes": [{"key": "intro", ...the fields of POST /v1/videos, "parents": ["other-key" | video id]}],
"dag_policy": "fail_fast" | "continue"}. Parents name other nodes by key, or videos the tenant already
has by id. The shape is checked by the domain's dag.validate (a cycle is refused with its path, 422) before
anything is written; then every node goes through the same path as POST /v1/videos in topological order,
each under the Idempotency-Key "<dag key>/<node key>", so a retried DAG request (same key, same body)
resubmits nothing new and completes a DAG that a 503 interrupted half-way. Rate and in-flight admission
judge the DAG once, as a whole: a DAG is never refused after some of its nodes were accepted, except by
an outage (503), which the retry heals.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from aiohttp import web

from spotreel.domain import dag, ids
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import gateway
from spotreel.api.errors import ApiError, invalid
from spotreel.services.gateway.jsonbody import read_object
from spotreel.api.submission import DAG_POLICIES, JOB_ID, check_idempotency_key, normalize
from spotreel.services.gateway.public.submit import accept

NODE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_NODES = 100


def _nodes(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    unknown = sorted(set(body) - {"nodes", "dag_policy"})
    if unknown:
        raise invalid(unknown[0], f"unknown field {unknown[0]!r}")
    nodes = body.get("nodes")
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise invalid("nodes", f"nodes must be a list of 1 to {MAX_NODES} videos")
    policy = body.get("dag_policy")
    if policy is None:
        policy = DAG_POLICIES[0]
    if policy not in DAG_POLICIES:
        raise invalid("dag_policy", f"dag_policy must be one of {list(DAG_POLICIES)}")
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise invalid(f"nodes[{i}]", "each node must be an object")
        if not isinstance(n.get("key"), str) or not NODE_KEY.fullmatch(n["key"]):
            raise invalid(f"nodes[{i}].key", "key must be 1-64 of [A-Za-z0-9._-], starting with a letter or digit")
        if "dag_policy" in n:
            raise invalid(f"nodes[{i}].dag_policy", "dag_policy is set once, for the whole DAG")
    return nodes, policy


async def submit_dag(request: web.Request) -> web.Response:
    gw = gateway(request)
    gw.shed("shed_submission", gw.cfg.shed_submissions_lag_seconds, "submit")
    tenant = request[TENANT]
    given = request.headers.get("Idempotency-Key")
    key = check_idempotency_key(given) if given is not None else "gen-" + uuid.uuid4().hex
    nodes, policy = _nodes(await read_object(request))
    keys = [n["key"] for n in nodes]
    inner = set(keys)
    bodies: dict[str, dict[str, Any]] = {}
    for i, n in enumerate(nodes):
        fields = {k: v for k, v in n.items() if k != "key"}
        parents = fields.pop("parents", None)
        if parents is None:  # not `or []`: {} or "" is a wrong type, not "no parents" (schemathesis found it)
            parents = []
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            raise invalid(f"nodes[{i}].parents", "parents must be a list of node keys or video ids")
        if len(set(parents)) != len(parents):
            raise invalid(f"nodes[{i}].parents", "parents must be distinct")
        try:
            bodies[n["key"]] = normalize({**fields, "dag_policy": policy}, gw.cfg,
                                         allow_private_callbacks=bool(gw.settings.webhook_allow_private)) \
                | {"parents": parents}
        except ApiError as exc:
            exc.field = f"nodes[{i}].{exc.field}" if exc.field else f"nodes[{i}]"
            raise
        for p in parents:
            if p not in inner and not JOB_ID.fullmatch(p):
                raise invalid(f"nodes[{i}].parents", f"parent {p!r} is neither a node of this DAG nor a video id")
    try:
        shape = dag.validate([dag.DagNode(k, tuple(p for p in bodies[k]["parents"] if p in inner)) for k in keys])
    except dag.DagError as exc:
        raise ApiError(422, "invalid_dag", str(exc), field="nodes",
                       cycle=list(exc.cycle) if exc.cycle else None) from None

    job_of = {k: ids.job_id_for(tenant.tenant_id, f"{key}/{k}") for k in keys}
    first_new = await gw.deps.reads.get_claim(job_of[shape.order[0]]) is None
    if first_new:
        for k in keys:
            gw.admission.check_priority(tenant, bodies[k]["priority"])
        now = gw.deps.clock_ms()
        gw.admission.check_rate(tenant, now)
        await gw.admission.check_in_flight(tenant)
    answers = []
    for k in shape.order:
        body = dict(bodies[k])
        body["parents"] = [job_of.get(p, p) for p in body["parents"]]
        if len(body["parents"]) > gw.cfg.max_parents:
            raise invalid("nodes", f"node {k!r} has more than {gw.cfg.max_parents} parents")
        answer = await accept(gw, tenant, f"{key}/{k}", body, admitted=True,
                              known_parents=frozenset(job_of.values()))
        answers.append({"key": k, **answer})
    return web.json_response({"idempotency_key": key, "dag_policy": policy, "order": list(shape.order),
                              "videos": answers}, status=202, headers={"Idempotency-Key": key})
