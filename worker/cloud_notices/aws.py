"""AWS: the spot interruption notice and the rebalance recommendation, read through IMDSv2.

IMDSv2 wants a session token first (PUT /latest/api/token with its TTL), then every GET carries it. The
token is renewed a minute before it expires, and at once when the service answers 401 (a restarted service,
or a token it no longer knows).

- /latest/meta-data/spot/instance-action: 404 while nothing is planned; `{"action": "terminate" | "stop" |
  "hibernate", "time": "<ISO 8601 UTC>"}` once the instance is to be interrupted at `time` (two minutes);
- /latest/meta-data/events/recommendations/rebalance: 404, or `{"noticeTime": "<ISO 8601>"}` once EC2
  judges the instance at raised risk of interruption (it may come well before the notice, or with none).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Callable

from spotreel.worker.cloud_notices.base import INTERRUPTION, REBALANCE, CloudWarning, MetadataError, Response, join, request

DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TOKEN_TTL_S = 21600  # IMDSv2's longest
ACTIONS = ("terminate", "stop", "hibernate")


def renew_before(ttl_s: float) -> float:
    """How long before its expiry a token is renewed: a minute, or a quarter of a short TTL."""
    return min(60.0, ttl_s / 4)


def parse_time(text: str) -> float:
    """ISO 8601 (`YYYY-MM-DDTHH:MM:SSZ`, with or without fractions or an offset) → epoch seconds.
    A time without a zone is UTC, as IMDS writes it."""
    stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def parse_instance_action(body: str) -> CloudWarning | None:
    """The instance-action document → an interruption at its time; None when it names no known action.
    A document that is not JSON or has no parseable time raises ValueError (the reader logs and retries)."""
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError(f"instance-action is not an object: {body[:200]!r}")
    action = str(doc.get("action", "")).lower()
    if action not in ACTIONS:
        return None
    deadline = parse_time(str(doc["time"]))
    return CloudWarning("aws", INTERRUPTION, f"spot {action} at {doc['time']}", deadline)


def parse_rebalance(body: str) -> CloudWarning:
    doc = json.loads(body)
    if not isinstance(doc, dict) or "noticeTime" not in doc:
        raise ValueError(f"rebalance recommendation without noticeTime: {body[:200]!r}")
    return CloudWarning("aws", REBALANCE, f"rebalance recommendation at {doc['noticeTime']}")


class AwsReader:
    cloud = "aws"

    def __init__(self, endpoint: str = "", timeout_s: float = 2.0, token_ttl_s: int = TOKEN_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base = endpoint or DEFAULT_ENDPOINT
        self.timeout_s = timeout_s
        self.token_ttl_s = token_ttl_s
        self._clock = clock
        self._token = ""
        self._token_until = 0.0
        self._rebalance_seen = False  # told once: the document stays there until the instance goes

    def poll(self) -> CloudWarning | None:
        action = self._get(ACTION_PATH)
        if action.status == 200:
            warning = parse_instance_action(action.body)
            if warning is not None:
                return warning
        elif action.status != 404:
            raise MetadataError(f"{ACTION_PATH}: HTTP {action.status}")
        if self._rebalance_seen:
            return None
        rebalance = self._get(REBALANCE_PATH)
        if rebalance.status == 200:
            self._rebalance_seen = True
            return parse_rebalance(rebalance.body)
        if rebalance.status != 404:
            raise MetadataError(f"{REBALANCE_PATH}: HTTP {rebalance.status}")
        return None

    def acknowledge(self) -> None:
        return None  # EC2 takes no answer: the instance goes at the notice's time

    def _get(self, path: str) -> Response:
        resp = request("GET", join(self.base, path), {TOKEN_HEADER: self._session()}, self.timeout_s)
        if resp.status == 401:
            self._token = ""
            resp = request("GET", join(self.base, path), {TOKEN_HEADER: self._session()}, self.timeout_s)
        return resp

    def _session(self) -> str:
        now = self._clock()
        if self._token and now < self._token_until - renew_before(self.token_ttl_s):
            return self._token
        resp = request("PUT", join(self.base, TOKEN_PATH), {TOKEN_TTL_HEADER: str(self.token_ttl_s)}, self.timeout_s,
                       body=b"")
        if resp.status != 200 or not resp.body.strip():
            raise MetadataError(f"PUT {TOKEN_PATH}: HTTP {resp.status}")
        self._token, self._token_until = resp.body.strip(), now + self.token_ttl_s
        return self._token
