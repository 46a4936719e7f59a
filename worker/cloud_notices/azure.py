"""Azure: Scheduled Events of the instance metadata service, of which `Preempt` is a Spot VM's eviction.

GET /metadata/scheduledevents?api-version=2020-07-01 with `Metadata: true` answers
`{"DocumentIncarnation": n, "Events": [{"EventId", "EventType", "ResourceType", "Resources": [vm names],
"EventStatus": "Scheduled" | "Started", "NotBefore": "<RFC 1123 time>", ...}]}`. A Preempt event gives at
least 30 s before `NotBefore`. The event lists the VMs it concerns (an availability set or scale set
shares one document), so the reader asks once for this VM's name (instance/compute/name) and keeps only
events naming it. Once the worker has checkpointed and released, it approves the event at once
(POST the same URL with `{"StartRequests": [{"EventId": id}]}`), so Azure need not wait out the notice.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Callable

from spotreel.worker.cloud_notices.base import INTERRUPTION, CloudWarning, MetadataError, join, request

log = logging.getLogger("spotreel.worker.cloud_notices")

DEFAULT_ENDPOINT = "http://169.254.169.254"
EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
HEADERS = {"Metadata": "true"}
NOTICE_S = 30.0  # a Preempt event's shortest notice: the deadline when NotBefore is empty
# The service starts on a VM's first Scheduled Events request, which Azure says may take up to two minutes.
FIRST_REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Preempt:
    event_id: str
    deadline: float  # epoch seconds
    not_before: str


def parse_events(body: str, vm_name: str | None, now: float) -> list[Preempt]:
    """The Preempt events of the document that concern this VM (all of them when its name is unknown),
    soonest first. An empty NotBefore (an event already started) is taken as NOTICE_S from now."""
    doc = json.loads(body)
    events = doc.get("Events") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ValueError(f"scheduled events document without Events: {body[:200]!r}")
    found = []
    for event in events:
        if not isinstance(event, dict) or event.get("EventType") != "Preempt":
            continue
        resources = event.get("Resources") or []
        if vm_name is not None and resources and vm_name not in resources:
            continue
        raw = str(event.get("NotBefore") or "").strip()
        deadline = parsedate_to_datetime(raw).timestamp() if raw else now + NOTICE_S
        found.append(Preempt(str(event["EventId"]), deadline, raw))
    return sorted(found, key=lambda p: p.deadline)


def start_requests(event_ids: list[str]) -> bytes:
    return json.dumps({"StartRequests": [{"EventId": e} for e in event_ids]}).encode()


class AzureReader:
    cloud = "azure"

    def __init__(self, endpoint: str = "", timeout_s: float = 2.0, wall: Callable[[], float] = time.time) -> None:
        self.base = endpoint or DEFAULT_ENDPOINT
        self.timeout_s = timeout_s
        self._wall = wall
        self._vm_name: str | None = None
        self._named = False
        self._started = False
        self.pending: list[str] = []  # Preempt events seen, to approve once the worker has released

    def poll(self) -> CloudWarning | None:
        self._learn_name()
        timeout = self.timeout_s if self._started else max(self.timeout_s, FIRST_REQUEST_TIMEOUT_S)
        resp = request("GET", join(self.base, EVENTS_PATH), dict(HEADERS), timeout)
        if resp.status != 200:
            raise MetadataError(f"scheduledevents: HTTP {resp.status}")
        self._started = True
        preempts = parse_events(resp.body, self._vm_name, self._wall())
        if not preempts:
            return None
        self.pending = [p.event_id for p in preempts]
        first = preempts[0]
        return CloudWarning("azure", INTERRUPTION, f"Preempt {first.event_id} not before {first.not_before or 'now'}",
                            first.deadline)

    def acknowledge(self) -> None:
        if not self.pending:
            return
        resp = request("POST", join(self.base, EVENTS_PATH), {**HEADERS, "Content-Type": "application/json"},
                       self.timeout_s, body=start_requests(self.pending))
        if resp.status != 200:
            raise MetadataError(f"scheduledevents StartRequests: HTTP {resp.status}")
        log.info("approved scheduled events %s", ", ".join(self.pending))
        self.pending = []

    def _learn_name(self) -> None:
        if self._named:
            return
        try:
            resp = request("GET", join(self.base, NAME_PATH), dict(HEADERS), self.timeout_s)
        except MetadataError:
            return  # asked again on the next poll
        self._named = True
        if resp.status == 200 and resp.body.strip():
            self._vm_name = resp.body.strip()
        else:
            log.warning("this VM's name is unknown (HTTP %d): every Preempt event counts", resp.status)
