"""The gateway's idle long-polls, waiting their turn to ask a partition for work (policy: dispatch/asking.py).

A poll whose worker may ask now gets a partition and a request id at once. The others wait in arrival
order and are woken only when one of them may go: when a partition's pool stats change (the dispatch
listener's thread hands that over to the loop) or when an answer frees a slot. Waking every idle poll on
every change would cost as much as the stampede it replaces, so a change first counts the slots the hinted
partitions still take and wakes that many. A waiting poll also wakes by itself when its worker's presence
is due, to scout a partition that never published stats, and at least once a second to notice a client
that went away. Everything runs on the gateway's event loop.

Presence by pulse: the idle polls' workers are `offer`ed here for as long as their poll lasts, and the
gateway's pulse (worker_api/intake.py) takes those whose presence is due (`vouch`) into the pulse to their
own partition: the scheduler counts them idle as a RequestWork would, without a request, an answer and a
wake-up of the poll for each. At the seeds' peak over HTTP, idle workers' presence asks were nine in ten
of the gateway's lease requests. The first `vouch` switches the policy's presence asks off
(`Asking.presence_by_pulse`); a gateway that does not pulse (one built inside a test) keeps asking.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from spotreel.adapters.partitioning import partition_for
from spotreel.dispatch.aio import result_within
from spotreel.dispatch.asking import REFUSED, Asking
from spotreel.dispatch.order import WorkView
from spotreel.domain.commands import IdleWorker

Models = tuple[str, ...]
# A waiting poll looks at its client at least this often.
SLICE_S = 1.0


class IdlePolls:
    def __init__(self, asking: Asking, view: Callable[[Models], WorkView], new_id: Callable[[], str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.asking = asking
        self._read_view = view
        self._new_id = new_id
        self._clock = clock
        # models -> worker -> its waiting poll, oldest first: a change looks only at the groups it may serve
        self._waiters: dict[Models, dict[str, asyncio.Future]] = {}
        self._models: dict[str, Models] = {}  # worker -> the group it waits in
        # What the stats show per set of models: unchanged until the next stats change (`stats_changed`).
        self._views: dict[Models, WorkView] = {}
        self._offers: dict[str, IdleWorker] = {}  # worker -> what its idle poll offers, while it lasts

    def offer(self, worker: IdleWorker) -> None:
        """The worker's idle (not draining) lease poll began: vouch for it while it lasts."""
        self._offers[worker.worker_id] = worker

    def withdraw(self, worker: IdleWorker) -> None:
        """Its poll ended (a newer poll of the same worker keeps its own offer)."""
        if self._offers.get(worker.worker_id) is worker:
            del self._offers[worker.worker_id]

    def vouch(self) -> dict[int, list[IdleWorker]]:
        """The offered workers whose presence is due, by their own partition, counted as their ask; from now
        on presence goes in the pulses only."""
        self.asking.presence_by_pulse = True
        now, n = self._clock(), self.asking.partitions
        due: dict[int, list[IdleWorker]] = {}
        for worker_id, worker in self._offers.items():
            if self.asking.next_due(worker_id, now) <= 0:
                due.setdefault(partition_for(worker_id, n), []).append(worker)
                self.asking.vouched(worker_id, now)
        return due

    def _view(self, models: Models) -> WorkView:
        view = self._views.get(models)
        if view is None:
            view = self._views[models] = self._read_view(models)
        return view

    def stats_changed(self) -> None:
        """A partition's pool stats changed what they show (the dispatch listener, handed to the loop)."""
        self._views.clear()
        self.changed()

    def _take(self, worker_id: str, models: Models, view: WorkView, now: float) -> tuple[int, str] | None:
        p = self.asking.pick(worker_id, models, view, now)
        if p is None:
            return None
        request_id = f"rw-{self._new_id()}"
        self.asking.sent(request_id, worker_id, p, models, now)
        return p, request_id

    async def next(self, worker_id: str, models: Models, timeout: float) -> tuple[int, str] | None:
        """(partition, request id) to ask now, counted as out; None when `timeout` (or a slice of it)
        passed first or a newer poll of the same worker took over. The caller sends the RequestWork at once
        and reports its answer (or a failed send) to `answered`."""
        now = self._clock()
        view = self._view(models)
        got = self._take(worker_id, models, view, now)
        if got is not None or timeout <= 0:
            return got
        due = SLICE_S if self.asking.presence_by_pulse else self.asking.next_due(worker_id, now) or SLICE_S
        wait = min(timeout, SLICE_S, due)
        if len(view.known) < self.asking.partitions:
            wait = min(wait, self.asking.scout_s)
        old = self._remove(worker_id)
        if old is not None and not old.done():
            old.set_result(None)  # that poll's client has given up: a worker polls once at a time
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(models, {})[worker_id] = fut
        self._models[worker_id] = models
        # The poll's own future, ended by a timer (cancelled) when the wait runs out: `asyncio.wait` with a
        # timeout builds a set, a waiter and callbacks per wait, for thousands of waiting polls at a peak.
        try:
            got = await result_within(fut, wait)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result() is not None:
                self.answered(fut.result()[1], None)  # woken, then cancelled: the slot was never used
            raise
        finally:
            group = self._waiters.get(models)
            if group is not None and group.get(worker_id) is fut:
                self._remove(worker_id)
        if not fut.cancelled():
            return got  # woken (partition, request id), or None: a newer poll of the worker took over
        return self._take(worker_id, models, self._view(models), self._clock()) if timeout > wait else None

    def _remove(self, worker_id: str) -> asyncio.Future | None:
        models = self._models.pop(worker_id, None)
        if models is None:
            return None
        group = self._waiters.get(models, {})
        fut = group.pop(worker_id, None)
        if not group:
            self._waiters.pop(models, None)
        return fut

    def answered(self, request_id: str, answer: Any) -> None:
        """The answer to a request this gateway sent (None: the send failed); a freed slot may let a
        waiting poll go. Only a refusal needs the stats (the version it holds the partition at)."""
        models = self.asking.models_of(request_id)
        view = self._view(models) if models is not None and getattr(answer, "reason", None) == REFUSED else None
        if self.asking.answered(request_id, answer, view):
            self.changed()

    def changed(self) -> None:
        """Stats changed or a slot was freed: wake as many waiting polls as may go now, oldest first. A
        group of models whose hinted partitions take no more requests is skipped whole."""
        if not self._waiters:
            return
        now = self._clock()
        for models, group in list(self._waiters.items()):
            view = self._view(models)
            free = self.asking.free(models, view)
            if free <= 0:
                continue
            for worker_id, fut in list(group.items()):
                if free <= 0:
                    break
                if fut.done():
                    continue
                got = self._take(worker_id, models, view, now)
                if got is None:
                    continue
                if got[0] in view.hinted:
                    free -= 1
                self._remove(worker_id)
                fut.set_result(got)

    @property
    def waiting(self) -> int:
        return len(self._models)
