"""The gateway's part in judging leases by when workers sent their renewals (spotreel.dispatch.intake).

Every worker request the worker API reads is stamped, for the commands it produces, with this gateway's id
and the time the worker sent it. Every `pulse_seconds` the gateway sends a GatewayPulse to every partition
of the commands topic: `vouched_ms`, the time before which every lease command it started to read is
already on the topic (no later than the send time of the oldest one still being produced), no later than now less how late this very
pulse runs (the event loop's lag), and no later than the newest send time among the requests it read
since the last pulse (while it works off a backlog, what it reads is as old as the backlog): the last two
stand for the requests not even read yet. A gateway that falls behind,
is frozen or is starved of CPU vouches for less, so the scheduler holds the expiry of the leases whose
holders came through it (services/scheduler/intake.py); its last pulse, on a clean stop, says `leaving`.
Lease polls are stamped but not counted: a poll waits for work, not for the log.

The pulse to each partition also vouches for the idle workers whose presence there is due (`presence`,
the idle polls' `vouch`, idlepolls.py): each partition gets its own list, the rest of the pulse is the same."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator

from aiohttp import web

from spotreel.dispatch import intake
from spotreel.dispatch.intake import SENT_AT_HTTP_HEADER
from spotreel.domain.commands import GatewayPulse

log = logging.getLogger("spotreel.gateway")


class Intake:
    def __init__(self, clock_ms: Callable[[], int], gateway_id: str | None = None) -> None:
        self.gateway_id = gateway_id or f"gw-{uuid.uuid4().hex[:12]}"
        self.clock_ms = clock_ms
        self._reading: dict[int, int] = {}  # request serial -> its send time (ms), until its command is produced
        self._serial = 0
        self._frontier: int | None = None  # the newest send time among the requests read since the last pulse
        self.lag_ms = 0
        self.sent = 0  # pulses sent
        # The idle workers whose presence is due, by partition (IdlePolls.vouch), once the idle polls exist.
        self.presence: Callable[[], dict[int, list[Any]]] | None = None

    @contextmanager
    def reading(self, told: str | None, counted: bool = True) -> Iterator[None]:
        """The block handles one worker request: its commands carry this gateway and the worker's send time
        (`told`: the X-Spotreel-Sent-At header); `counted`, it holds the vouched time back until its command is
        produced (or the block ends without one)."""
        now = self.clock_ms()
        serial = self._serial = self._serial + 1
        sent = intake.sent_ms(told, now)
        if counted:  # by its send time: what is vouched for is what was sent before, read or not
            self._reading[serial] = sent
        self._frontier = sent if self._frontier is None else max(self._frontier, sent)
        try:
            with intake.origin(self.gateway_id, sent,
                               (lambda: self._reading.pop(serial, None)) if counted else None):
                yield
        finally:
            self._reading.pop(serial, None)

    def vouched_ms(self) -> int:
        """No later than now less the loop's lag, than the oldest lease command not yet produced, and than the
        newest send time among the requests read since the last pulse: while a backlog is worked off, what it
        reads is as old as the backlog, and what was sent after it may not be read yet."""
        now = self.clock_ms() - self.lag_ms
        return min(now, min(self._reading.values(), default=now),
                   self._frontier if self._frontier is not None else now)

    def pulse(self, leaving: bool = False) -> GatewayPulse:
        pulse = GatewayPulse(f"gp-{uuid.uuid4().hex}", self.gateway_id, self.vouched_ms(), leaving)
        self._frontier = None
        return pulse

    async def run(self, send: Callable[[Any, int], Awaitable[None]], partitions: int, every_s: float) -> None:
        """Pulses until cancelled. The lag is how much later than asked the loop woke this task."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + every_s
            await asyncio.sleep(every_s)
            self.lag_ms = max(0, int((loop.time() - asked) * 1000))
            await self.send_all(send, partitions)

    async def send_all(self, send: Callable[[Any, int], Awaitable[None]], partitions: int,
                       leaving: bool = False) -> None:
        pulse = self.pulse(leaving)
        idle = self.presence() if self.presence is not None and not leaving else {}
        results = await asyncio.gather(
            *(send(dataclasses.replace(pulse, idle=tuple(idle[p])) if p in idle else pulse, p)
              for p in range(partitions)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # Kafka away: the scheduler holds, at most its gateway hold, and the next pulse tries again
            log.warning("gateway pulse not sent to %d of %d partitions: %s", len(failed), partitions, failed[0])
        self.sent += 1


def intake_middleware(intake: Intake):
    """Each worker request's commands carry this gateway and the worker's send time (intake.py); a lease
    command holds the gateway's vouched time back until Kafka has it."""
    @web.middleware
    async def stamp(request: web.Request, handler):
        with intake.reading(request.headers.get(SENT_AT_HTTP_HEADER), counted="/leases/" in request.path):
            return await handler(request)
    return stamp


def start_pulses(app: web.Application, key: web.AppKey, settings: Any, deps: Any, every_s: float) -> None:
    """The gateway's pulses (intake.py) while `app` runs, and a last one saying it leaves when it stops. Only
    the gateway service starts them (a gateway built inside a test does not), and `every_s` 0 turns them off."""
    if every_s <= 0:
        return
    intake: Intake = app[key]

    async def send(pulse: Any, partition: int) -> None:
        await deps.commands.send(pulse, partition=partition)  # type: ignore[call-arg]

    running: list[asyncio.Task] = []  # the app's state is frozen by the time it starts: kept here

    async def start(_app: web.Application) -> None:
        running.append(asyncio.get_running_loop().create_task(intake.run(send, settings.partitions, every_s)))

    async def stop(_app: web.Application) -> None:
        for task in running:
            task.cancel()
        try:
            await asyncio.wait_for(intake.send_all(send, settings.partitions, leaving=True), 5.0)
        except (asyncio.TimeoutError, Exception) as exc:  # the scheduler holds at most its gateway hold
            log.warning("gateway: the leaving pulse was not sent: %s", exc)

    app.on_startup.append(start)
    app.on_shutdown.append(stop)

