"""What every worker API route shares (routes.py, leasepoll.py): the sub-app's keys, the body's fields as the
worker API reads them, and the dispatch bus a route needs the scheduler through."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from spotreel.api.errors import ApiError, invalid, not_found
from spotreel.api.submission import _JOB_ID
from spotreel.dispatch import intake as dispatch_intake
from spotreel.dispatch.intake import SENT_AT_HTTP_HEADER
from spotreel.services.gateway.context import Gateway
from spotreel.services.gateway.jsonbody import whole_number
from spotreel.services.gateway.worker_api.intake import Intake
from spotreel.dispatch.lateverdicts import LateVerdicts
from spotreel.services.gateway.worker_api.leasedesk import LeaseDesk

WORKER = web.RequestKey("worker_key", str)
PROFILES = web.AppKey("worker_profiles", dict)
DESK = web.AppKey("lease_desk", LeaseDesk)
IDLE = web.AppKey("idle_polls", list)  # [IdlePolls] once made
INTAKE = web.AppKey("intake", Intake)
LATE = web.AppKey("late_verdicts", LateVerdicts)
_WORKER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
MAX_LONG = 2**63 - 1


def worker_id_of(request: web.Request) -> str:
    wid = request.match_info["id"]
    if not 1 <= len(wid) <= 128 or not set(wid) <= _WORKER_ID_CHARS:
        raise invalid("id", "worker id: 1-128 of letters, digits and -_.:")
    return wid


def job_id_of(request: web.Request) -> str:
    job_id = request.match_info["job_id"]
    if not _JOB_ID.match(job_id):
        raise not_found()
    return job_id


async def read_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        # `1.0` is the integer 1, as in the public API (jsonbody.py) and JSON Schema: an epoch written so
        # was refused although /openapi.json documents it `integer` (schemathesis).
        body = json.loads(raw or b"{}", parse_float=whole_number)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return body


TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def take(body: dict[str, Any], spec: dict[str, tuple]) -> dict[str, Any]:
    """Fields by name: (type, required) or (type, required, largest int). bool is not an int here; unknown
    fields are refused."""
    extra = set(body) - set(spec) - {"command_id"}
    if extra:
        raise invalid(sorted(extra)[0], "unknown field")
    out: dict[str, Any] = {}
    for name, (kind, required, *bound) in spec.items():
        if name not in body or body[name] is None:
            if required:
                raise invalid(name, f"{name} is required")
            continue
        value = body[name]
        if isinstance(value, bool) and kind != "bool" or not isinstance(value, TYPES[kind]):
            raise invalid(name, f"{name} must be a {kind}")
        # Every integer here (epochs, steps, sizes, milliseconds) is an Avro long and never negative; a float
        # must be a number (Python's json accepts NaN and Infinity).
        top = bound[0] if bound else MAX_LONG
        if kind == "int" and not 0 <= value <= top:
            raise invalid(name, f"{name} must be between 0 and {top}")
        if kind == "float":
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise invalid(name, f"{name} must be a finite number")
        out[name] = value
    return out


def model_list(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
        raise invalid(field, f"{field} must be a list of model names")
    return tuple(value)


# A worker's fingerprint (domain/resume_match.py) is a short line of key=value pairs; anything longer is no
# fingerprint the worker's code writes.
MAX_FINGERPRINT_CHARS = 2048


def fingerprint_of(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_FINGERPRINT_CHARS:
        raise invalid("fingerprint", f"fingerprint must be a string of at most {MAX_FINGERPRINT_CHARS} characters")
    return value


def work_bus(gw: Gateway):
    if gw.deps.work is None:
        raise ApiError(503, "dispatch_unavailable", "this gateway has no connection to the scheduler",
                       retry_after=gw.cfg.retry_after_unavailable_s)
    return gw.deps.work


def note_age(request: web.Request, gw: Gateway) -> int:
    """How long the request waited to be read (its X-Spotreel-Sent-At to now), in ms: what the gateway sheds
    by; returned too (0 when the worker sent no time, or one ahead of the gateway's clock)."""
    now = gw.deps.clock_ms()
    age = now - dispatch_intake.sent_ms(request.headers.get(SENT_AT_HTTP_HEADER), now)
    gw.watch.note_age(age)
    return max(0, age)
