"""The simulated fleet over Kafka (`spotreel simulate --transport kafka`): workers inside the platform, as
`spotreel worker --transport kafka` runs them, with no gateway between them and the scheduler.

Each simulated worker sends what a real Kafka worker sends and waits for what it waits for: a RequestWork
to the partition the shared dispatch library chooses, one outstanding at a time, the answer read from the
assignments topic; fenced RenewLease / ReportProgress / RecordCheckpoint / CompleteJob / ReleaseLease
commands keyed by job id, each judged by the scheduler's verdict on the events topic; a grant that arrives
when the worker no longer waits for it is released (`unclaimed`). The fleet shares one listener thread and
one producer (a real worker has its own); the records on the wire are the same, so the control plane does
the same work. Answers are shaped as the gateway's HTTP answers (status and body), so spotreel.fleetsim.fleet drives
both transports with one worker model.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from spotreel.dispatch import lateverdicts, verdicts
from spotreel.dispatch.aio import AsyncDispatch
from spotreel.dispatch.listener import DispatchUnavailable
from spotreel.dispatch.asking import CROWD_ASKS, Asking
from spotreel.dispatch.sender import AsyncCommandSender
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.spec import flattened
from spotreel.domain.leases import UNCLAIMED
from spotreel.config.settings import Settings


@dataclass
class _Desk:
    """One worker's dispatch state: its outstanding request and the inbox of a waiting lease call."""

    pending: tuple[str, int, float] | None = None  # request id, partition, sent at
    inbox: asyncio.Queue | None = None
    asked: dict[str, float] = field(default_factory=dict)
    asking: Asking | None = None  # this worker's own policy, as a Kafka worker has (worker/transport_kafka.py)


class KafkaLink:
    def __init__(self, settings: Settings, *, lease_ttl_ms: int = 30_000, verdict_s: float = 10.0,
                 answer_s: float = 1.0, stale_s: float = 30.0, forget_s: float = 120.0,
                 idle_pass_s: float = 1.0, on_renewal_verdict: Callable[[int], None] | None = None,
                 seed: int | None = None) -> None:
        self.settings = settings
        self.lease_ttl_ms = lease_ttl_ms
        self.verdict_s = verdict_s
        # A renewal's answer comes within this long of its send, as the gateway's (renewal_answer_seconds).
        self.answer_s = answer_s
        self.late = lateverdicts.LateVerdicts()
        self.on_renewal_verdict = on_renewal_verdict  # ms from a renewal's send to its verdict (or the wait's end)
        self.stale_s = stale_s
        self.forget_s = forget_s
        self.idle_pass_s = idle_pass_s
        self._rng = random.Random(seed)  # every simulated worker's draws of its share of the crowd (asking.py)
        self.dispatch = AsyncDispatch(settings, name="sim")
        self.sender = AsyncCommandSender(settings, name="sim")
        self.desks: dict[str, _Desk] = {}
        self._models: dict[str, tuple[str, ...]] = {}  # the models each simulated worker asked for
        self.released_unclaimed = 0
        self._tasks: set[asyncio.Task] = set()
        self._ids = 0
        # Command and request ids: a counter under one random tag per run (unique like a worker's uuid4 ids,
        # without a uuid4 per message in the one process that plays the whole fleet).
        self._run = uuid.uuid4().hex[:8]
        # Set and replaced whenever pool stats change: every idle simulated worker waits on it, as each Kafka
        # worker waits on its own listener's stats.
        self._changed: asyncio.Event | None = None

    async def start(self) -> None:
        await self.dispatch.ensure_started()
        self._changed = asyncio.Event()
        self.dispatch.on_work_change(self._bump)

    def _bump(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()

    def close(self) -> None:
        self.dispatch.close()
        self.sender.close()

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}-{self._run}"

    async def call(self, kind: str, path: str, body: dict[str, Any], timeout: float) -> tuple[int, Any]:
        """What the gateway's worker API would answer for this request (status, body); raises
        DispatchUnavailable / asyncio.TimeoutError as a failed request."""
        parts = path.strip("/").split("/")  # internal/workers/{id}/{action} or internal/leases/{job}/{action}
        if parts[1] == "workers":
            if parts[3] == "register":
                return 200, {"worker_id": parts[2]}
            async with asyncio.timeout(timeout):  # no extra task per request, unlike wait_for
                return await self._lease(parts[2], body)
        async with asyncio.timeout(timeout):
            return await self._fenced(parts[3], parts[2], body)

    # -- leases ------------------------------------------------------------------------------------------

    def _on_answer(self, worker_id: str, answer: Any) -> None:
        desk = self.desks.get(worker_id)
        if desk is None:
            return
        if desk.pending is not None and desk.pending[0] == answer.request_id:
            desk.pending = None
        if desk.asking is not None:
            desk.asking.answered(answer.request_id, answer, self.dispatch.work_view(self._models.get(worker_id, ())))
        if desk.inbox is not None:
            desk.inbox.put_nowait(answer)
        elif isinstance(answer, ev.WorkAssigned):
            self._release(answer)

    def _release(self, answer: ev.WorkAssigned) -> None:
        command = cmd.ReleaseLease(f"unclaimed-{answer.request_id}", answer.job_id, answer.epoch, answer.worker_id,
                                   UNCLAIMED)
        task = asyncio.get_running_loop().create_task(self.sender.send(command))
        self._tasks.add(task)
        task.add_done_callback(self._released)

    def _released(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is None:
            self.released_unclaimed += 1

    async def _lease(self, worker_id: str, body: dict[str, Any]) -> tuple[int, Any]:
        await self.dispatch.ensure_started()
        desk = self.desks.setdefault(worker_id, _Desk())
        now = time.monotonic()
        for rid, at in list(desk.asked.items()):
            if now - at > self.forget_s:
                self.dispatch.forget_answer(rid)
                del desk.asked[rid]
        desk.inbox = inbox = asyncio.Queue()
        try:
            answer = await self._await_lease(worker_id, desk, inbox, body, now + max(0.5, body["wait_seconds"]))
        finally:
            desk.inbox = None
            while not inbox.empty():
                late = inbox.get_nowait()
                if isinstance(late, ev.WorkAssigned):
                    self._release(late)
        if answer is None:
            return 204, None
        # As a Kafka worker does (worker/transport_kafka.py): the pool's lease losses from pool-stats.
        losses, leased_s = self.dispatch.lease_losses(answer.pool)
        return 200, {**flattened(answer), "pool_lease_losses_1h": losses, "pool_leased_seconds_1h": leased_s}

    async def _await_lease(self, worker_id: str, desk: _Desk, inbox: asyncio.Queue, body: dict[str, Any],
                           deadline: float) -> ev.WorkAssigned | None:
        models = tuple(body["models"])
        self._models[worker_id] = models
        if desk.asking is None:
            desk.asking = Asking(self.settings.partitions, scout_s=self.idle_pass_s, stale_s=self.stale_s,
                                 crowd_asks=CROWD_ASKS, rng=self._rng)
        asking = desk.asking
        while True:
            now = time.monotonic()
            if desk.pending is not None and now - desk.pending[2] >= self.stale_s:
                desk.pending = None  # its owner may be gone: ask again (a late grant is released)
            if desk.pending is None:
                changed = self._changed
                p = asking.pick(worker_id, models, self.dispatch.work_view(models), now)
                if p is None:
                    # Nothing worth asking: wait for the pool stats to change, or this worker's presence.
                    wait = min(deadline - now, asking.next_due(worker_id, now) or self.idle_pass_s, self.idle_pass_s)
                    if wait <= 0:
                        return None
                    try:
                        async with asyncio.timeout(wait):
                            await (changed.wait() if changed is not None else asyncio.sleep(wait))
                    except TimeoutError:
                        pass
                    continue
                rid = f"rw-{worker_id}-{self._id('sim')}"
                desk.asked[rid] = now
                desk.pending = (rid, p, now)
                asking.sent(rid, worker_id, p, models, now)
                self.dispatch.watch_answer(rid, lambda a, w=worker_id: self._on_answer(w, a))
                try:
                    await self.sender.send(cmd.RequestWork(rid, worker_id, body["gpu_type"], models, (), False,
                                                           self.lease_ttl_ms, int(time.time() * 1000)),
                                           partition=p)
                except BaseException:
                    desk.pending = None
                    asking.answered(rid, None)
                    raise
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait = left if desk.pending is None else min(left, max(0.05, self.stale_s - (now - desk.pending[2])))
            try:
                async with asyncio.timeout(wait):
                    answer = await inbox.get()
            except TimeoutError:
                continue
            if isinstance(answer, ev.WorkAssigned):
                return answer

    # -- fenced commands ---------------------------------------------------------------------------------

    def _command(self, action: str, command_id: str, job_id: str, b: dict[str, Any]) -> Any:
        fence = (command_id, job_id, b["epoch"], b["worker_id"])
        if action == "heartbeat":
            return cmd.RenewLease(*fence)
        if action == "progress":
            return cmd.ReportProgress(*fence, b["step"], b["progress_pct"], b.get("phase", "denoising"))
        if action == "checkpoint":
            return cmd.RecordCheckpoint(*fence, b["checkpoint_key"], b["step"], b["progress_pct"], b["checksum"],
                                        b["size_bytes"], b.get("duration_ms"))
        if action == "complete":
            return cmd.CompleteJob(*fence, b["artifact_key"], b["artifact_checksum"], b["artifact_size_bytes"])
        if action == "release":
            return cmd.ReleaseLease(*fence, b.get("reason", "preempted"))
        raise ValueError(f"no such lease action: {action}")

    async def _fenced(self, action: str, job_id: str, body: dict[str, Any]) -> tuple[int, Any]:
        """What the gateway's worker API does for an HTTP worker (spotreel.dispatch.lateverdicts): a renewal
        is answered within `answer_s` of its send, pending when its verdict has not come; a late verdict is
        kept and told on the holder's next renewal (a refusal that proves the lease gone, a cancel or drain)."""
        await self.dispatch.ensure_started()
        command = self._command(action, self._id(f"k{action[:4]}"), job_id, body)
        fut = self.dispatch.expect_verdict(command.command_id, job_id)
        sent_at = time.monotonic()
        try:
            await self.sender.send(command)
        except BaseException:
            self.dispatch.forget_verdict(command.command_id, job_id)
            raise
        renewal = action in ("heartbeat", "progress")
        verdict_s = min(self.verdict_s, self.lease_ttl_ms / 3000.0) if renewal else self.verdict_s
        verdict, kept = await lateverdicts.verdict_of(
            self.dispatch, self.late, fut, command.command_id, (job_id, body["epoch"], body["worker_id"]), sent_at,
            renewal=renewal, answer_s=lateverdicts.answer_wait_s(self.answer_s, time.monotonic() - sent_at),
            verdict_s=verdict_s, on_wait=self.on_renewal_verdict if renewal else None)
        if isinstance(kept, ev.CommandRejected):
            verdict = kept
        if isinstance(verdict, ev.CommandRejected):
            return 409, {"error": {"code": verdict.reason}}
        answer: dict[str, Any] = {"verdict": "pending" if verdict is None else "accepted"}
        if renewal:
            answer |= verdicts.instructions(verdict) or {"cancel": False, "drain": False}
            if kept is not None:  # a cancel or drain asked in a verdict that came after its own answer
                told = verdicts.instructions(kept) or {}
                answer["cancel"], answer["drain"] = bool(told.get("cancel")), bool(told.get("drain"))
            pace = verdicts.pace(verdict, time.monotonic() - sent_at, self.lease_ttl_ms)
            if pace is not None:
                answer["renew_in_seconds"] = pace
        return (202 if verdict is None else 200), answer


__all__ = ["DispatchUnavailable", "KafkaLink"]
