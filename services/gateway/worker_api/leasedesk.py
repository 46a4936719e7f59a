"""The gateway's lease desk: the RequestWork commands this gateway sent, until they are answered, and the
leases that no long-poll was there to take.

The scheduler grants a lease (JobLeased is durable) before its answer, WorkAssigned, travels back over the
assignments topic. A long-poll that has ended by then (its deadline passed, its client went away) used to
drop the answer, and the lease sat unused until its TTL expired: at a few hundred simulated workers most
leases ended that way. The desk makes every answer to one of this gateway's requests land somewhere:

- Answers are routed by worker id, not by the poll that sent the request: the worker's open poll takes a
  lease whichever of its polls asked for it.
- With no open poll (or a poll whose client is gone) the lease is parked for `hold_s`; the worker's next
  poll claims it at once without a new RequestWork. Unclaimed by then, it is handed back with
  `ReleaseLease(reason="unclaimed")` under the lease's epoch, which requeues the job at once and costs it
  neither an attempt nor a preemption (domain `leases.UNCLAIMED`; refused as `lease_in_use` if the holder
  did act on it, so a lease that reached its worker after all is never taken away).
- A worker has at most one unanswered RequestWork from this gateway; its next poll waits for that answer
  instead of asking again. One older than `stale_s` (a partition whose owner is gone) no longer blocks a
  new request to another partition; if both are granted, the second lease is released as above. So a slow
  scheduler gets one request per waiting worker, not one per poll and partition, and no answer is lost.
- A lease written to a poll is remembered for `hold_s` until its worker acts on it: a fenced command of it
  through this gateway (`confirm`), or any event of the job on the events or replies topics, whichever
  gateway the command went through (`watch`, wired to the dispatch listener). A write can succeed into a socket
  whose client has just gone (the timeout fired on the worker's side first), so if the same worker polls
  again within `hold_s` without having acted on the lease, it did not get it: that poll is given the same
  lease again, same epoch, without a new RequestWork. A worker runs one video at a time and polls only
  when free, so a poll from the holder is the sign the lease did not arrive.
- Requests are remembered for `forget_s` (answered ones too: after a scheduler crash a refused RequestWork
  may be decided again and granted, see the scheduler README), so a late grant is still released.

Everything here runs on the gateway's event loop; the Kafka consumer thread hands answers over with
`call_soon_threadsafe`. Not covered: a gateway that dies between a RequestWork and its answer (the lease
expires after its TTL), and a lost answer whose worker polls next through another gateway (likewise).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from spotreel.dispatch.aio import result_within
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.leases import UNCLAIMED

log = logging.getLogger("spotreel.gateway.leasedesk")

SUPERSEDED = object()  # what a poll gets when a newer poll of the same worker took over


@dataclass
class _Sent:
    worker_id: str
    partition: int
    at: float
    answered: bool = False


class Mailbox:
    """A poll's answers: `asyncio.Queue`'s put_nowait, get_nowait and empty for the desk, and a timed get for
    the one handler that reads it, with a timer instead of `asyncio.wait_for(queue.get())` (a task per wait)."""

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def get_nowait(self) -> Any:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    async def get_within(self, timeout: float) -> Any:
        """The oldest item, or None when `timeout` seconds pass with none."""
        if not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await result_within(self._waiter, timeout)
            finally:
                self._waiter = None
        return self._items.popleft() if self._items else None


@dataclass
class Poll:
    """One long-poll of one worker: answers for that worker arrive in `queue`."""

    worker_id: str
    models: tuple[str, ...]
    draining: bool
    alive: Callable[[], bool]
    queue: Mailbox = field(default_factory=Mailbox)
    closed: bool = False

    def wants(self, answer: ev.WorkAssigned) -> bool:
        return not self.closed and not self.draining and answer.spec.model in self.models and self.alive()

    async def next(self, timeout: float) -> Any:
        """The next answer, SUPERSEDED, or None when `timeout` passed."""
        return await self.queue.get_within(timeout)


class LeaseDesk:
    def __init__(self, send: Callable[[Any], Awaitable[None]], *, hold_s: float = 5.0, stale_s: float = 30.0,
                 forget_s: float = 600.0, max_remembered: int = 200_000,
                 forget_answer: Callable[[str], None] = lambda rid: None,
                 clock: Callable[[], float] = time.monotonic,
                 on_outcome: Callable[[str], None] = lambda outcome: None,
                 watch: Callable[[str, Callable[[Any], None] | None], None] = lambda job_id, on_event: None) -> None:
        self._send = send
        self.hold_s = hold_s
        self.stale_s = stale_s
        self.forget_s = forget_s
        self.max_remembered = max_remembered
        self._forget_answer = forget_answer
        self._clock = clock
        # "delivered", "claimed", "released", "release_failed"; "redelivered" also counts as "claimed"
        self._on_outcome = on_outcome
        self._sent: OrderedDict[str, _Sent] = OrderedDict()  # oldest first
        self._unanswered: dict[str, dict[str, _Sent]] = defaultdict(dict)  # worker -> request id -> request
        self._polls: dict[str, Poll] = {}
        self._parked: dict[str, list[tuple[ev.WorkAssigned, asyncio.TimerHandle]]] = defaultdict(list)
        self._tasks: set[asyncio.Task] = set()
        # worker -> (the lease last written to its poll, when), until the worker acts on it or `hold_s` passes
        self._written: dict[str, tuple[ev.WorkAssigned, float]] = {}
        # `watch(job_id, on_event)`: call on_event for each event of the job from now on (None: stop watching)
        self._watch = watch

    # -- requests ----------------------------------------------------------------------------------------

    def sent(self, request_id: str, worker_id: str, partition: int) -> None:
        self._purge()
        s = _Sent(worker_id, partition, self._clock())
        self._sent[request_id] = s
        self._unanswered[worker_id][request_id] = s

    def unsent(self, request_id: str) -> None:
        """The RequestWork was not acknowledged by Kafka: nothing to wait for."""
        s = self._sent.pop(request_id, None)
        if s is not None:
            self._answered(request_id, s)
            self._forget_answer(request_id)

    def _answered(self, request_id: str, s: _Sent) -> None:
        s.answered = True
        mine = self._unanswered.get(s.worker_id)
        if mine is not None:
            mine.pop(request_id, None)
            if not mine:
                del self._unanswered[s.worker_id]

    def asking(self, worker_id: str) -> set[int]:
        """Partitions this worker's unanswered requests went to (stale ones included)."""
        return {s.partition for s in self._unanswered.get(worker_id, {}).values()}

    def waiting(self, worker_id: str) -> list[_Sent]:
        """This worker's unanswered requests that still block a new one (not stale yet)."""
        now = self._clock()
        return [s for s in self._unanswered.get(worker_id, {}).values() if now - s.at < self.stale_s]

    def until_stale(self, worker_id: str) -> float:
        now = self._clock()
        return min((self.stale_s - (now - s.at) for s in self.waiting(worker_id)), default=float("inf"))

    def _purge(self) -> None:
        now = self._clock()
        while self._sent:
            rid, s = next(iter(self._sent.items()))
            if now - s.at < self.forget_s and len(self._sent) < self.max_remembered:
                break
            del self._sent[rid]
            self._answered(rid, s)
            self._forget_answer(rid)

    # -- answers (on the loop; from the bus) -------------------------------------------------------------

    def on_answer(self, answer: Any) -> None:
        s = self._sent.get(answer.request_id)
        if s is None:
            return  # another gateway's request, or one forgotten long ago
        poll = self._polls.get(s.worker_id)
        if isinstance(answer, ev.WorkAssigned):
            del self._sent[answer.request_id]
            self._answered(answer.request_id, s)
            self._forget_answer(answer.request_id)
            if poll is not None and poll.wants(answer):
                poll.queue.put_nowait(answer)
            elif poll is not None and (poll.draining or answer.spec.model not in poll.models):
                self.release(answer)  # the worker asks for something else now: it will not take this one
            else:
                self.park(answer)
            return
        self._answered(answer.request_id, s)
        if poll is not None and not poll.closed:
            poll.queue.put_nowait(answer)

    # -- polls -------------------------------------------------------------------------------------------

    def open(self, worker_id: str, models: tuple[str, ...], draining: bool, alive: Callable[[], bool]) -> Poll:
        """A new poll of this worker; an older one still open is told it was superseded (its client has
        given up: a worker polls once at a time)."""
        old = self._polls.get(worker_id)
        if old is not None:
            self.close(old)
            old.queue.put_nowait(SUPERSEDED)
        poll = Poll(worker_id, models, draining, alive)
        self._polls[worker_id] = poll
        return poll

    def claim(self, poll: Poll) -> ev.WorkAssigned | None:
        """A lease parked for this worker, if any; parked leases it would not take are released. Else the
        lease last written to this worker's poll if the worker never acted on it (see the module's notes)."""
        parked = self._parked.pop(poll.worker_id, [])
        got = None
        for answer, handle in parked:
            handle.cancel()
            if got is None and not poll.draining and answer.spec.model in poll.models:
                got = answer
            else:
                self.release(answer)
        if got is None:
            got = self._unconfirmed(poll)
        return got

    def _unconfirmed(self, poll: Poll) -> ev.WorkAssigned | None:
        written = self._written.pop(poll.worker_id, None)
        if written is None:
            return None
        answer, at = written
        self._watch(answer.job_id, None)
        if self._clock() - at >= self.hold_s:
            return None  # too old to tell: the lease's TTL decides
        if poll.draining or answer.spec.model not in poll.models:
            self.release(answer)  # it did not arrive and the worker would not take it now
            return None
        self._on_outcome("redelivered")
        log.info("lease %s epoch %d written to %s, which polls again without acting on it: written again",
                 answer.job_id, answer.epoch, answer.worker_id)
        return answer

    def confirm(self, worker_id: str, job_id: str) -> None:
        """The worker sent a command for this job (or the job moved on): the lease written to it arrived, or
        writing it again would be of no use."""
        written = self._written.get(worker_id)
        if written is not None and written[0].job_id == job_id:
            del self._written[worker_id]
            self._watch(job_id, None)

    def _forget_written(self, answer: ev.WorkAssigned) -> None:
        written = self._written.get(answer.worker_id)
        if written is not None and written[0] is answer:
            del self._written[answer.worker_id]
            self._watch(answer.job_id, None)

    def close(self, poll: Poll) -> None:
        """The poll ended; a lease that reached its queue but not its client is parked."""
        if poll.closed:
            return
        poll.closed = True
        if self._polls.get(poll.worker_id) is poll:
            del self._polls[poll.worker_id]
        while not poll.queue.empty():
            item = poll.queue.get_nowait()
            if isinstance(item, ev.WorkAssigned):
                self.park(item)

    def delivered(self, answer: ev.WorkAssigned, claimed: bool = False) -> None:
        """Written to the worker: by the poll that was waiting, or `claimed` from the parked leases."""
        earlier = self._written.pop(answer.worker_id, None)
        if earlier is not None and earlier[0].job_id != answer.job_id:
            self._watch(earlier[0].job_id, None)
        self._written[answer.worker_id] = (answer, self._clock())
        # Any event of the job from now on (a renewal through another gateway, its end) confirms it.
        self._watch(answer.job_id, lambda event, w=answer.worker_id, j=answer.job_id: self.confirm(w, j))
        asyncio.get_running_loop().call_later(self.hold_s, self._forget_written, answer)
        self._on_outcome("claimed" if claimed else "delivered")

    # -- parked leases -----------------------------------------------------------------------------------

    def park(self, answer: ev.WorkAssigned) -> None:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(self.hold_s, self._unclaimed, answer)
        self._parked[answer.worker_id].append((answer, handle))

    def parked(self, worker_id: str | None = None) -> int:
        if worker_id is not None:
            return len(self._parked.get(worker_id, ()))
        return sum(len(v) for v in self._parked.values())

    def _unclaimed(self, answer: ev.WorkAssigned) -> None:
        entries = self._parked.get(answer.worker_id, [])
        kept = [(a, h) for a, h in entries if a is not answer]
        if len(kept) == len(entries):
            return  # claimed or released meanwhile
        if kept:
            self._parked[answer.worker_id] = kept
        else:
            self._parked.pop(answer.worker_id, None)
        self.release(answer)

    def release(self, answer: ev.WorkAssigned) -> None:
        task = asyncio.get_running_loop().create_task(self._release(answer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, answer: ev.WorkAssigned) -> None:
        command = cmd.ReleaseLease(f"unclaimed-{answer.request_id}", answer.job_id, answer.epoch, answer.worker_id,
                                   UNCLAIMED)
        try:
            await self._send(command)
            self._on_outcome("released")
            log.info("lease %s epoch %d of %s reached no poll: released", answer.job_id, answer.epoch,
                     answer.worker_id)
        except Exception as exc:  # Kafka down: the lease expires after its TTL instead
            self._on_outcome("release_failed")
            log.warning("could not release unclaimed lease %s epoch %d: %s", answer.job_id, answer.epoch, exc)

    async def aclose(self) -> None:
        """Shutdown: hand back every parked lease now rather than leave it to its TTL."""
        for worker_id in list(self._parked):
            for answer, handle in self._parked.pop(worker_id):
                handle.cancel()
                self.release(answer)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
