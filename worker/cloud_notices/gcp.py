"""GCP: a preemptible or Spot VM learns of its preemption from /computeMetadata/v1/instance/preempted.

The value is `FALSE` until the VM is being preempted, then `TRUE`; the VM is stopped about 30 s later
(Compute Engine sends ACPI G2 at the same time, which the OS turns into SIGTERM for a worker that runs as a
service). The reader reads the value once, then hangs on `?wait_for_change=true&last_etag=E&timeout_sec=T`:
the server answers at once when the value's ETag is no longer E, else when it changes, else after T seconds
with the unchanged value. Every request carries `Metadata-Flavor: Google`, which the server demands.
"""

from __future__ import annotations

import time
from typing import Callable
from urllib.parse import urlencode

from spotreel.worker.cloud_notices.base import INTERRUPTION, CloudWarning, MetadataError, join, request

DEFAULT_ENDPOINT = "http://metadata.google.internal"
PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
FLAVOR = {"Metadata-Flavor": "Google"}
NOTICE_S = 30.0  # from the TRUE to the stop


def parse_preempted(body: str) -> bool:
    value = body.strip().upper()
    if value not in ("TRUE", "FALSE"):
        raise ValueError(f"instance/preempted is neither TRUE nor FALSE: {body[:100]!r}")
    return value == "TRUE"


def warning_for(preempted: bool, seen_at: float) -> CloudWarning | None:
    """GCP names no deadline: the stop comes about NOTICE_S after the value turned TRUE."""
    if not preempted:
        return None
    return CloudWarning("gcp", INTERRUPTION, "instance/preempted is TRUE", seen_at + NOTICE_S)


class GcpReader:
    cloud = "gcp"

    def __init__(self, endpoint: str = "", timeout_s: float = 2.0, wait_s: int = 60,
                 wall: Callable[[], float] = time.time) -> None:
        self.base = endpoint or DEFAULT_ENDPOINT
        self.timeout_s = timeout_s
        self.wait_s = wait_s  # one hanging GET's longest wait; the socket waits a few seconds more
        self._wall = wall
        self._etag: str | None = None

    def poll(self) -> CloudWarning | None:
        if self._etag is None:
            url, timeout = join(self.base, PREEMPTED_PATH), self.timeout_s
        else:
            query = urlencode({"wait_for_change": "true", "last_etag": self._etag, "timeout_sec": self.wait_s})
            url, timeout = join(self.base, f"{PREEMPTED_PATH}?{query}"), self.wait_s + self.timeout_s + 3.0
        resp = request("GET", url, dict(FLAVOR), timeout)
        if resp.status != 200:
            self._etag = None  # a failed hanging GET starts again with a plain read
            raise MetadataError(f"{PREEMPTED_PATH}: HTTP {resp.status}")
        warning = warning_for(parse_preempted(resp.body), self._wall())
        self._etag = next((v for k, v in resp.headers.items() if k.lower() == "etag"), None) or "0"
        return warning

    def acknowledge(self) -> None:
        return None  # Compute Engine takes no answer
