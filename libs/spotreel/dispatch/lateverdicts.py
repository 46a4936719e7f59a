"""Renewal verdicts that come after the answer, for every path a lease holder's command takes: the gateway's
worker API (services/gateway/worker_api/routes.py), the simulator's Kafka link and the worker's own Kafka
transport (worker/transport_kafka.py, which keeps its store under its lock).

A heartbeat or progress report is answered within `renewal_answer_seconds` of when the holder sent it
(`answer_wait_s`): with the scheduler's verdict when it has one by then, else `pending` (the command is on
the commands log, judged at its append or send time, so it keeps the lease whatever the verdict's delay:
services/scheduler/README.md, "Leases under load"). The verdict is still watched for, up to
`verdict_seconds` from the send. When it comes it counts toward how far behind the scheduler runs (on the
gateway: loopwatch.py, the same figure it sheds by), and what it asks of the holder is kept for the job
until the holder's next renewal, whose answer then tells it even if that renewal's own verdict is pending
too:

- a refusal that proves the lease gone (`GONE`: a stale epoch, another worker, an expired lease, a job that
  ended or left the table) is answered 409 with that reason: every later command of that lease is refused
  for the same reason, since epochs only grow and an ended job absorbs everything;
- a renewal verdict asking the holder to stop (`cancel`) or to checkpoint and hand the lease back (`drain`)
  sets those flags in the answer.

A later renewal verdict that asks nothing withdraws what was kept (a resumed job's drain); other verdicts (a
checkpoint recorded, a refusal of that one command such as `invalid_progress`) change nothing. Only the
newest renewal verdict or refusal counts (by the scheduler's `at_ms`; verdicts come on two topics, the events
and the replies, with no order between them). Kept per job, for the lease (epoch and
worker) it judged; the newest verdict's time of at most `MAX_JOBS` jobs is remembered (the job heard from
least recently forgotten first)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from spotreel.dispatch import verdicts
from spotreel.dispatch.aio import result_within, settled_within
from spotreel.domain import events as ev
from spotreel.domain.outcomes import Reason

GONE = frozenset({Reason.STALE_EPOCH, Reason.WORKER_MISMATCH, Reason.LEASE_EXPIRED, Reason.TERMINAL,
                  Reason.EVICTED})
MAX_JOBS = 50_000
# However late a renewal already is, its verdict gets this long after the command is on the log.
MIN_ANSWER_WAIT_S = 0.05


def answer_wait_s(answer_s: float, waited_s: float) -> float:
    """How long to wait for a renewal's verdict once its command is on the log: what is left of `answer_s`
    after `waited_s` (from the holder's send: in a socket, a gateway's queue, the produce), never less than
    `MIN_ANSWER_WAIT_S` (or `answer_s` if that is less: 0 answers at once). Counted from the handler instead,
    a renewal that waited two seconds to be read would be answered a second after that."""
    return max(min(MIN_ANSWER_WAIT_S, answer_s), answer_s - max(0.0, waited_s))


def tells(verdict: Any) -> bool:
    """Whether a verdict asks something of the holder that a later answer must still say."""
    if isinstance(verdict, ev.CommandRejected):
        return verdict.reason in GONE
    told = verdicts.instructions(verdict)
    return bool(told and (told["cancel"] or told["drain"]))


class LateVerdicts:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic, max_jobs: int = MAX_JOBS) -> None:
        self._monotonic = monotonic
        self._max_jobs = max_jobs
        self._kept: dict[str, tuple[int, str, Any]] = {}  # job id -> (epoch, worker id, verdict)
        self._newest: dict[str, int] = {}  # job id -> at_ms of its newest verdict (oldest job first)

    def follow(self, fut: asyncio.Future[Any], job_id: str, epoch: int, worker_id: str, sent_at: float,
               left_s: float, done: Callable[[int], None]) -> None:
        """Watch `fut` (the verdict of a command already answered pending) for `left_s` more seconds; `done(ms)`
        once it came or the time ran out, with the milliseconds since `sent_at` (the caller stops routing
        the verdict there and counts the wait)."""
        timer = asyncio.get_running_loop().call_later(max(0.0, left_s), fut.cancel)

        def settled(f: asyncio.Future[Any]) -> None:
            timer.cancel()
            done(int((self._monotonic() - sent_at) * 1000))
            if not f.cancelled():
                self.note(job_id, epoch, worker_id, f.result())

        fut.add_done_callback(settled)

    def note(self, job_id: str, epoch: int, worker_id: str, verdict: Any) -> None:
        """A verdict of this lease's command, in time or late: the newest one that speaks of the lease decides
        what is kept. Only a renewal's verdict states the holder's instructions (as of it), and only a refusal
        in `GONE` speaks of the lease; any other verdict (a checkpoint recorded, a refused progress report)
        leaves what is kept as it is."""
        telling = tells(verdict)
        if not (telling or verdicts.instructions(verdict) is not None):
            return
        at = verdict.at_ms
        newest = self._newest.pop(job_id, None)
        if newest is not None and at < newest:
            self._newest[job_id] = newest
            return  # an older verdict that came later (the other topic)
        self._newest[job_id] = at
        if len(self._newest) > self._max_jobs:
            oldest = next(iter(self._newest))
            del self._newest[oldest]
            self._kept.pop(oldest, None)
        if telling:
            self._kept[job_id] = (epoch, worker_id, verdict)
        else:
            self._kept.pop(job_id, None)

    def kept(self, job_id: str, epoch: int, worker_id: str) -> Any:
        """The newest verdict that still tells this lease's holder something, or None."""
        entry = self._kept.get(job_id)
        if entry is None or entry[0] != epoch or entry[1] != worker_id:
            return None
        return entry[2]

    def __len__(self) -> int:
        return len(self._kept)


async def verdict_of(bus: Any, late: LateVerdicts, fut: asyncio.Future[Any], command_id: str,
                     lease: tuple[str, int, str], sent_at: float, *, renewal: bool, answer_s: float,
                     verdict_s: float, on_wait: Callable[[int], None] | None = None) -> tuple[Any, Any]:
    """Wait for the verdict `fut` of a lease holder's command already sent (`bus`: an AsyncDispatch, whose
    `forget_verdict` ends the routing; `sent_at`: monotonic, before the send; `lease`: job, epoch, worker).
    A renewal waits `answer_s` (from `answer_wait_s`) and is then followed in `late` up to `verdict_s` from
    the send; any other command waits up to `verdict_s`. `on_wait(ms)` gets the verdict's wait once known.
    Returns (verdict or None, the kept verdict an earlier renewal's late answer left for this lease)."""
    job_id, epoch, worker_id = lease
    following = False
    try:
        if renewal and answer_s < verdict_s:
            if await settled_within(fut, answer_s):
                verdict = None if fut.cancelled() else fut.result()
            else:
                def watched(waited_ms: int) -> None:  # the verdict came, or verdict_s passed
                    bus.forget_verdict(command_id, job_id)
                    if on_wait is not None:
                        on_wait(waited_ms)

                late.follow(fut, job_id, epoch, worker_id, sent_at, verdict_s - (time.monotonic() - sent_at),
                            watched)
                verdict, following = None, True
        else:
            verdict = await result_within(fut, verdict_s)
        if not following and on_wait is not None:
            on_wait(int((time.monotonic() - sent_at) * 1000))
    finally:
        if not following:
            bus.forget_verdict(command_id, job_id)
    kept = None
    if verdict is not None:
        late.note(job_id, epoch, worker_id, verdict)
    elif renewal:
        kept = late.kept(job_id, epoch, worker_id)  # what an earlier renewal's late verdict said
    return verdict, kept
