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
- With a model registry (the local stack's gateway, and this test's), `duration`: the frame count
  round(duration x fps) outside what the model takes (a product of two fields, rounded).
- DAGs: a node's `parents` naming neither another node of the request nor a video id, duplicate node keys
  or a cycle (`invalid_dag`): references inside the request body.
(Two former entries are gone: the backoffs no longer conflict, the max caps the base; a lease poll without
gpu_type/models from a worker that never registered is a 409, which schemathesis counts as accepted.)

`use_after_free` expects a resource to be gone after a 2xx DELETE. DELETE /v1/schedules/{id} stops the
schedule and keeps it, readable and listed with status `deleted` and its occurrences (a soft delete, as
Google's AIP-164 describes one: the 202 means the command is durable, the scheduler applies it).
DELETE /v1/videos/{id} is the first spelling of cancel (the video stays readable, status cancelled); the
document marks it deprecated and links POST /v1/videos/{id}/cancel instead, but schemathesis infers a link
to it from GET /v1/videos/{id}'s `id`. Reads after those two are the API as documented; a read after any
other DELETE still fails.
"""

from __future__ import annotations

import json
import re

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData, UseAfterFree
from schemathesis.specs.openapi.checks import positive_data_acceptance, use_after_free

# (field, what the message must say): refusals of fields whose other refusals the document states.
SEMANTIC_MESSAGE = ((re.compile(r"(?:nodes\[\d+\]\.|job\.)?duration"), "frames"),
                    (re.compile(r"cron"), "never fires"),
                    (re.compile(r"nodes\[\d+\]\.parents"), "neither a node of this DAG nor a video id"))
SEMANTIC_CODE = frozenset({"invalid_dag"})
KEEPS_RESOURCE = re.compile(r"DELETE /v1/(?:videos|schedules)/[^/]+")


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


@schemathesis.check
def use_after_free_but_cancel_and_schedule_delete(ctx, response, case):
    try:
        return use_after_free(ctx, response, case)
    except UseAfterFree as failure:
        if KEEPS_RESOURCE.fullmatch(failure.free):
            return None
        raise
