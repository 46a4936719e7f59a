"""The gateway's asyncio event loop (settings.event_loop).

`uvloop` (libuv under asyncio's API) by default: each worker request crosses the gateway's loop several times
(a read, the handler's task, a produce, a verdict handed in from the consumer thread, a write), and at the
seeds' peak the stock selector loop's own machinery (`_run_once`, handles, transports, self-pipe wake-ups)
is a large share of the gateway's CPU. uvloop answers more worker requests for less CPU each
(docs/decisions/0011-uvloop-in-the-gateway-only.md). `asyncio` keeps the stock loop (the baseline of that
comparison, or a platform without uvloop's wheel). The scheduler keeps the stock loop (Faust drives its own),
and so does the fleet simulator: on uvloop its 4,000-connection aiohttp client failed requests (registrations
at the fleet's start, and progress reports whose leases then expired under live workers).
"""

from __future__ import annotations

import asyncio
from typing import Callable

CHOICES = ("uvloop", "asyncio")


def check(setting: str) -> str:
    """The setting, or ValueError naming the variable."""
    if setting not in CHOICES:
        raise ValueError(f"SPOTREEL_EVENT_LOOP must be one of {', '.join(CHOICES)}, got {setting!r}")
    return setting


def factory(setting: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new loop of the chosen kind."""
    if check(setting) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def name_of(loop: asyncio.AbstractEventLoop) -> str:
    """'uvloop' or 'asyncio': what a running loop is (for logs and tests)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
