"""Where a worker's command came in: the gateway it came through and when the worker sent it.

The gateway's worker API sets them for the request it handles (`origin`, a context variable, like the
trace context); `AsyncCommandSender` writes them as two headers on the command it produces. The scheduler
reads them (services/scheduler/intake.py): a lease command is judged at the time it was sent, not at the
time a gateway that fell behind got it into the log (at most the scheduler's gateway hold earlier than its
append time), and a lease whose holder last came through a gateway is not expired before that gateway has
vouched (GatewayPulse) for every request it took in before the deadline.

The worker tells its send time in `X-Spotreel-Sent-At` (epoch milliseconds); without it, or with a time
that is not plausible (in the future, or more than `MAX_AGE_MS` ago), the gateway's own reading time
stands in. Workers on the Kafka transport produce their commands themselves: nothing in between can fall
behind, and their commands carry neither header."""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

GATEWAY_HEADER = "spotreel-gateway"
SENT_HEADER = "spotreel-sent-ms"
SENT_AT_HTTP_HEADER = "X-Spotreel-Sent-At"
MAX_AGE_MS = 600_000  # a send time older than this is not believed (a clock far off), the reading time is used
MAX_AHEAD_MS = 5_000  # nor one this far in the future

_origin: contextvars.ContextVar[tuple[str, int, Callable[[], None] | None] | None] = contextvars.ContextVar(
    "spotreel_intake", default=None)


def sent_ms(told: str | None, read_ms: int) -> int:
    """The send time to stamp: the worker's `X-Spotreel-Sent-At` if plausible, else the gateway's reading
    time. Never after the reading time (a clock ahead of the gateway's gains nothing)."""
    if told is not None:
        try:
            value = int(told)
        except ValueError:
            return read_ms
        if read_ms - MAX_AGE_MS <= value <= read_ms + MAX_AHEAD_MS:
            return min(value, read_ms)
    return read_ms


@contextmanager
def origin(gateway_id: str, sent: int, on_produced: Callable[[], None] | None = None) -> Iterator[None]:
    """Commands produced inside the block carry `gateway_id` and `sent` (epoch ms) as their intake headers;
    `on_produced` is called once one of them is acknowledged by Kafka (`produced`)."""
    token = _origin.set((gateway_id, sent, on_produced))
    try:
        yield
    finally:
        _origin.reset(token)


def kafka_headers(headers: list[Any] | None) -> list[Any] | None:
    """`headers` plus the intake headers of the current origin, if any."""
    current = _origin.get()
    if current is None:
        return headers
    return [*(headers or ()), (GATEWAY_HEADER, current[0].encode()), (SENT_HEADER, str(current[1]).encode())]


def current() -> tuple[str, int] | None:
    """(gateway id, sent ms) of the current origin, None outside one."""
    found = _origin.get()
    return None if found is None else (found[0], found[1])


def produced_hook() -> Callable[[], None] | None:
    """What to call once a command produced now is on the topic: the current origin's `on_produced`, taken
    at the produce call (the ack may settle outside the origin's block)."""
    current = _origin.get()
    return current[2] if current is not None else None


def read(headers: Sequence[tuple[str, Any]] | None) -> tuple[str | None, int | None]:
    """(gateway id, sent ms) from a consumed record's headers; None for what is missing or unreadable."""
    gateway: str | None = None
    sent: int | None = None
    for name, value in headers or ():
        if name == GATEWAY_HEADER and value:
            gateway = bytes(value).decode(errors="replace")
        elif name == SENT_HEADER and value:
            try:
                sent = int(bytes(value))
            except ValueError:
                sent = None
    return gateway, sent
