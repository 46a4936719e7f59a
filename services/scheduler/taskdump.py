"""`kill -USR2 <scheduler pid>` writes every asyncio task's await chain (through async generators, which
`Task.print_stack` cuts off) and the consumer's flow state to the log: the way to see where a scheduler
that is alive but not processing waits, without a debugger on the machine. (USR1 is mode's own dump.)"""

from __future__ import annotations

import asyncio
import io
import logging
import signal
from collections.abc import Callable
from typing import Any

log = logging.getLogger("spotreel.scheduler.taskdump")


def await_chain(obj: Any, depth: int = 40) -> list[str]:
    """Where a coroutine (or async generator) is suspended, outermost first, following what it awaits."""
    out = []
    while obj is not None and depth > 0:
        depth -= 1
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None) or getattr(obj, "gi_frame", None)
        if frame is not None:
            out.append(f"{frame.f_code.co_filename.split('site-packages/')[-1]}:{frame.f_lineno} "
                       f"{frame.f_code.co_name}")
        nxt = (getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None)
               or getattr(obj, "gi_yieldfrom", None))
        if nxt is None and isinstance(obj, asyncio.Future):
            out.append(repr(obj)[:200])
        obj = nxt
    return out


def dump_tasks() -> str:
    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out.write(f"{len(tasks)} asyncio tasks\n")
    for task in tasks:
        out.write(f"* {task.get_name()}\n")
        for line in await_chain(task.get_coro()):
            out.write(f"    {line}\n")
    # Suspended async generators (a task's chain stops at them): where each one waits.
    import gc
    import types

    for obj in gc.get_objects():
        if isinstance(obj, types.AsyncGeneratorType) and obj.ag_frame is not None:
            out.write(f"* async generator {obj.__qualname__}\n")
            for line in await_chain(obj):
                out.write(f"    {line}\n")
    return out.getvalue()


def install(loop: asyncio.AbstractEventLoop, state: Callable[[], str] = lambda: "") -> None:
    loop.add_signal_handler(signal.SIGUSR2, lambda: log.warning("task dump:\n%s\n%s", state(), dump_tasks()))
