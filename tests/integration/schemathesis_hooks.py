"""Schemathesis hooks for tests/integration/test_gateway_fuzz.py (loaded by the CLI it runs, through
SCHEMATHESIS_HOOKS): two of schemathesis' checks, each with the exact cases it gets wrong about this API
taken out, and nothing else. The test runs every other check as shipped.

`positive_data_acceptance` expects every request the document allows to be accepted. /openapi.json states
every rule it can (callback_url's form as a pattern, page_token's form as a pattern with 409 for a
well-formed token that does not verify, the model registry's names, sizes, steps and samplers); what is
left cannot be stated in JSON Schema, so a schema-valid request can still get the 422 the document
describes in words for these, and only these refusals are let through, each told by its error code, field
and message:
- `cron` that matches the documented grammar but never fires (`0 0 30 2 *`): only a calendar can tell.
- With a model registry (the local stack's gateway, and this test's), `duration` outside the model's frame
  range at the request's fps (frames_min / fps to frames_max / fps): a product of two fields, which only a
  branch per fps could state, more than schemathesis' generator takes (openapi_rules.registry_rules). A
  frame count off the model's grid (4n+1) is not refused: the nearest count on it renders.
- DAGs: a node's `parents` naming neither another node of the request nor a video id, duplicate node keys
  or a cycle (`invalid_dag`): references inside the request body.
Not here, since JSON Schema states them or schemathesis accepts the answer: the backoffs (the max caps the
base, so they never conflict); a lease poll without gpu_type/models from a worker that never registered (a
409, which schemathesis counts as accepted).

`use_after_free` expects a resource to be gone after a 2xx DELETE. DELETE /v1/schedules/{id} answers 200
once the read model shows the schedule deleted, and its routes answer 404 from then on; if that takes longer
than the gateway waits it answers 202 (the command is durable and applies later), and a read right after a
202 may still find the schedule, as documented. This test's gateway runs without a scheduler, so its DELETEs
answer 202: a read after a DELETE that answered 202 is let through, a read after one that answered 200 still
fails (the local stack, with its scheduler, answers 200). DELETE /v1/videos/{id} is not served (cancel is a
POST, after which the video stays readable), so it needs no entry.
"""

from __future__ import annotations

import json
import re

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData, UseAfterFree
from schemathesis.specs.openapi.checks import positive_data_acceptance, use_after_free

# (field, what the message must say): refusals of fields whose other refusals the document states.
SEMANTIC_MESSAGE = ((re.compile(r"(?:nodes\[\d+\]\.|job\.)?duration"), "fps, duration"),
                    (re.compile(r"cron"), "never fires"),
                    (re.compile(r"nodes\[\d+\]\.parents"), "neither a node of this DAG nor a video id"))
SEMANTIC_CODE = frozenset({"invalid_dag"})
PENDING_DELETE = re.compile(r"DELETE /v1/schedules/[^/]+")


def _semantic_refusal(response, case) -> bool:
    if response.status_code != 422:
        return False
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    field = str(error.get("field", ""))
    told = any(rule.fullmatch(field) and says in str(error.get("message", "")) for rule, says in SEMANTIC_MESSAGE)
    return error.get("code") in SEMANTIC_CODE or told


@schemathesis.check
def positive_data_acceptance_but_unstateable_rules(ctx, response, case):
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if _semantic_refusal(response, case):
            return None
        raise


def _only_pending_deletes(ctx, case) -> bool:
    """Every DELETE /v1/schedules/{id} before this case that succeeded answered 202 (not applied yet)."""
    statuses = []
    for related in ctx.internals.find_related(case_id=case.id):
        if related.operation.method.lower() != "delete" or not related.path.startswith("/v1/schedules/"):
            continue
        answer = ctx.internals.find_response(case_id=related.id)
        if answer is not None and 200 <= answer.status_code < 300:
            statuses.append(answer.status_code)
    return bool(statuses) and all(status == 202 for status in statuses)


@schemathesis.check
def use_after_free_but_a_schedule_delete_not_applied_yet(ctx, response, case):
    try:
        return use_after_free(ctx, response, case)
    except UseAfterFree as failure:
        if PENDING_DELETE.fullmatch(failure.free) and _only_pending_deletes(ctx, case):
            return None
        raise
