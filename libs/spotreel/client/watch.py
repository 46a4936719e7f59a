"""Following a job's SSE stream across dropped connections (`spotreel watch`, `submit --wait`).

A connection can end before the job does: the network drops, the gateway restarts, or the gateway ends a
stream at its maximum length. Each reconnect sends the id of the last event seen as `Last-Event-ID`, and
the gateway answers only with states past it (spotreel/api/sse.py), so the person watching sees every state change
once and the bar never jumps back.
"""

from __future__ import annotations

import http.client
import time
from contextlib import closing
from typing import Any, Callable, Iterator, TextIO

from spotreel.client.http import Client, ClientError
from spotreel.client.output import TERMINAL, progress_line

# Consecutive connections that brought nothing before giving up: about half a minute of backoff, enough
# for a gateway restart, short enough that a stack that is down is reported.
RECONNECTS = 6
MAX_BACKOFF_SECONDS = 8.0


class Watch:
    """Iterates the job's status snapshots until it ends, each once. `last_event_id`, `reconnects` and
    `last` say where it stands; a refusal by the gateway (404, 401) raises at once, a drop reconnects."""

    def __init__(self, client: Client, job_id: str, *, reconnects: int = RECONNECTS, backoff: float = 0.5,
                 timeout: float = 120.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.job_id = client, job_id
        self.max_failures, self.backoff, self.timeout, self.sleep = reconnects, backoff, timeout, sleep
        self.last_event_id: str | None = None
        self.last: dict[str, Any] | None = None
        self.reconnects = 0

    @property
    def status(self) -> str:
        return (self.last or {}).get("status", "unknown")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        failures = 0
        while True:
            ended, error = False, None
            try:
                with closing(self.client.messages(self.job_id, self.last_event_id, self.timeout)) as stream:
                    for m in stream:
                        if m.id is not None:
                            self.last_event_id = m.id
                        if m.event == "status":
                            failures = 0
                            self.last = m.data
                            yield m.data
                        elif m.event == "end":
                            ended = True
                            break
            except ClientError as exc:
                # Refused (404, 401): asking again changes nothing. Unreachable, 429 or 5xx: it may pass.
                if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                    raise
                error = exc
            except (OSError, ValueError, http.client.HTTPException) as exc:  # a drop mid-stream
                error = exc
            if self.status in TERMINAL:
                return
            if ended:  # the gateway's maximum stream length, not a failure: resume after a breath
                self.sleep(self.backoff)
            else:
                failures += 1
                if failures > self.max_failures:
                    why = error or "the stream ended without its end event"
                    raise ClientError(f"the progress stream of {self.job_id} dropped {failures} times in a row "
                                      f"(last: {why}); the job goes on: `spotreel status {self.job_id}`")
                self.sleep(min(MAX_BACKOFF_SECONDS, self.backoff * 2 ** (failures - 1)))
            self.reconnects += 1


def follow(watch: Watch, out: TextIO | None) -> str:
    """Render the snapshots (None: quietly, for --json) until the job ends; returns its last status."""
    tty = out is not None and out.isatty()
    last = None
    for snap in watch:
        line = progress_line(snap)
        if out is None or line == last:
            continue
        # On a terminal the bar redraws in place; in a pipe or a log, one line per change.
        out.write(("\r\x1b[2K" + line) if tty else line + "\n")
        out.flush()
        last = line
    if tty:
        out.write("\n")
    return watch.status


def watch_json(watch: Watch) -> dict[str, Any]:
    return {"job_id": watch.job_id, "status": watch.status, "last_event_id": watch.last_event_id,
            "reconnects": watch.reconnects, "video": watch.last}
