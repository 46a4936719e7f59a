"""Server-Sent Events on both ends: the gateway frames a job's stream, the CLI's client parses it back.

Standard library only, so the client (client/http.py) can use it wherever the package is installed.

Every event carries `id: <job event version>`. The version is the job's own counter (one per accepted
event, kept in the read model), so it only grows, means the same on every gateway replica, and says
exactly what a client has seen: a reconnect with `Last-Event-ID: N` is answered with the job's state only
once its version is past N (`resume_from`, `is_new`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

# Nothing seen yet: every version, 0 included (a job known only from the gateway's claim), is newer.
NOTHING_SEEN = -1
# Longer than any version a job reaches and short enough that a hostile header costs nothing to parse.
_MAX_ID_DIGITS = 18


def resume_from(last_event_id: str | None) -> int:
    """The version a reconnecting client has already seen, from its Last-Event-ID header.

    An id this gateway cannot have sent (absent, empty, not a plain decimal) counts as nothing seen: the
    client gets the current state again rather than an error, which an EventSource would not retry.
    """
    given = (last_event_id or "").strip()
    if not given.isascii() or not given.isdigit() or len(given) > _MAX_ID_DIGITS:
        return NOTHING_SEEN
    return int(given)


def is_new(version: int, seen: int) -> bool:
    """A state is sent once: only when its version is past what the client has (the snapshot at a version
    is the fold of the events up to it, so the same version is the same state)."""
    return version > seen


def frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    """One event; `data` is JSON on a single line (json.dumps escapes newlines, so no multi-line data)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, sort_keys=True)}\n\n".encode()


KEEP_ALIVE = b": keep-alive\n\n"


@dataclass(frozen=True)
class Message:
    event: str
    data: Any
    # The last event id in force when this event was dispatched (the spec's "last event ID buffer": an
    # event without an id line keeps the previous one), or None before any id was sent.
    id: str | None


def parse(lines: Iterable[bytes | str]) -> Iterator[Message]:
    """Events of a text/event-stream, as the SSE spec dispatches them (comments and data-less blocks
    skipped); `data` decoded as JSON."""
    event, data, last_id = "", [], None
    for raw in lines:
        line = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw).rstrip("\r\n")
        if not line:
            if data:
                yield Message(event or "message", json.loads("\n".join(data)), last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\x00" not in value:
            last_id = value
