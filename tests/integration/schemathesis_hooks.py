"""Schemathesis hooks for tests/integration/test_gateway_fuzz.py (loaded by the CLI it runs, through
SCHEMATHESIS_HOOKS): two of schemathesis' checks, each with the exact cases it gets wrong about this API
taken out, and nothing else. The test runs every other check as shipped.

`positive_data_acceptance` expects every request the document allows to be accepted. A handful of rules
cannot be stated in JSON Schema, so a schema-valid request can still get the 422 the document lists for them
(README "What a request must look like"); only these refusals are let through, each told by its error code
and field:
- `callback_url` (also `nodes[i].callback_url`, `job.callback_url`): the webhook sender's address rule. A host
  that is a non-global IP literal in any of inet_aton's spellings (`http://0`, `2130706433`, `0x7f.1`),
  `localhost`, port 0 or 22, a netloc urlsplit refuses.
- `cron` that matches the documented grammar but never fires (`0 0 30 2 *`): only a calendar can tell.
- `backoff_max_seconds` below `backoff_base_seconds` (a comparison of two fields).
- With a model registry (the local stack's gateway, and this test's), `duration`: the frame count
  round(duration x fps) outside what the model takes (a product of two fields). The registry's other rules
  (model names, sizes, steps, samplers) are in the document, one anyOf branch per model.
- DAGs: a node's `parents` naming neither another node of the request nor a video id, duplicate node keys
  or a cycle (`invalid_dag`), more than max_parents once node keys are mapped to videos (`nodes`).
- `parents` of POST /v1/videos naming no video of the tenant (`unknown_parent`).
- `page_token`: a token this gateway did not sign.
- `models` of POST /internal/workers/{id}/lease: a poll may leave gpu_type and models out only once the
  worker registered (state the document cannot carry).

`use_after_free` expects a resource to be gone after a 2xx DELETE. DELETE /v1/videos/{id} is *cancel*: the
video stays readable with status `cancelled` and its history (202: the command is durable, the scheduler
applies it). DELETE /v1/schedules/{id} stops the schedule; it stays readable and listed with status
`deleted`. Reads after those two are the API as documented; a read after any other DELETE still fails.
"""

from __future__ import annotations

import json
import re

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData, UseAfterFree
from schemathesis.specs.openapi.checks import positive_data_acceptance, use_after_free

SEMANTIC_FIELD = re.compile(r"(?:nodes\[\d+\]\.|job\.)?(?:callback_url|backoff_max_seconds)"
                            r"|nodes\[\d+\]\.parents|nodes|page_token")
# (field, what the message must say): refusals of a field whose other refusals the document states.
SEMANTIC_MESSAGE = ((re.compile(r"(?:nodes\[\d+\]\.|job\.)?duration"), "frames"),
                    (re.compile(r"cron"), "never fires"))
SEMANTIC_CODE = frozenset({"invalid_dag", "unknown_parent"})
KEEPS_RESOURCE = re.compile(r"DELETE /v1/(?:videos|schedules)/[^/]+")


STATEFUL_FIELD = {"/internal/workers/{id}/lease": "models"}


def _semantic_refusal(response, case) -> bool:
    if response.status_code != 422:
        return False
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    field = str(error.get("field", ""))
    told = any(rule.fullmatch(field) and says in str(error.get("message", "")) for rule, says in SEMANTIC_MESSAGE)
    return (error.get("code") in SEMANTIC_CODE or bool(SEMANTIC_FIELD.fullmatch(field)) or told
            or STATEFUL_FIELD.get(case.operation.path) == field)


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
