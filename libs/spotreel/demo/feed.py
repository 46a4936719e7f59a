"""A job's SSE stream read on a thread, so the demo's main loop keeps its deadline and watches its
worker while the stream is silent. The stream is reopened when the gateway ends it before the job ends
(its maximum stream time) or a connection drops, from the last event seen (Last-Event-ID), so no
update is printed twice."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from spotreel.client.http import Client, ClientError
from spotreel.client.cli import TERMINAL

RECONNECTS = 5


class StatusFeed:
    def __init__(self, client: Client, job_id: str) -> None:
        self._client = client
        self._job_id = job_id
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"demo-feed-{job_id}", daemon=True)

    def start(self) -> "StatusFeed":
        self._thread.start()
        return self

    def close(self) -> None:
        # The reading thread may sit in a blocking read; as a daemon it ends with the process.
        self._closed.set()

    def next(self, timeout: float) -> tuple[str, Any] | None:
        """("status", snapshot), ("error", line) once the stream cannot be read, or None after `timeout`."""
        try:
            return self._items.get(timeout=timeout)
        except queue.Empty:
            return None

    def _read(self) -> None:
        failures, status, last_id = 0, None, None
        while not self._closed.is_set():
            try:
                for m in self._client.messages(self._job_id, last_id, timeout=60.0):
                    if self._closed.is_set():
                        return
                    last_id = m.id if m.id is not None else last_id
                    if m.event == "status":
                        status = m.data.get("status", status)
                        self._items.put(("status", m.data))
                        failures = 0
            except (ClientError, OSError, ValueError) as exc:
                failures += 1
                if failures > RECONNECTS:
                    self._items.put(("error", f"the job's progress stream failed: {exc}"))
                    return
                time.sleep(1.0)
                continue
            if status in TERMINAL:
                return
