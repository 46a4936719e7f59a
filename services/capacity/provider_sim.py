"""The `simulated` provider: the fleet simulator's workers (spotreel.fleetsim.fleet.SimWorker), added and drained by the
capacity manager instead of kept at a fixed size.

The workers run on an asyncio loop in a thread of the capacity process and speak the real worker protocol
to a gateway (register, lease long-poll, heartbeats, progress, checkpoints, complete, release), so the
scheduler, the projector and the pool statistics cannot tell them from real ones; only the steps are
sleeps and the artifacts are never written. Each machine has a cold start, a step time and an exponential
lifetime (mean `mtbf_s`); a share of the deaths is announced `notice_lead_s` ahead through `notices()`,
and the manager's drain is what makes such a worker checkpoint and release its lease. A worker nobody
drained before its machine dies vanishes with its lease, which then expires.

The manager calls in from its own thread; everything the workers touch stays on the loop thread, and the
bookkeeping the two share is behind one lock.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections import Counter
from typing import Any, Coroutine

import aiohttp

from spotreel.services.capacity.providers import Worker
from spotreel.fleetsim.config import SimConfig
from spotreel.fleetsim.figures import Attempt
from spotreel.fleetsim.fleet import Shared, SimWorker

log = logging.getLogger("spotreel.capacity")


class SimulatedProvider:
    def __init__(self, pool: str, gateway_url: str, worker_key: str, cfg: SimConfig,
                 notice_lead_s: float = 30.0, name_prefix: str = "sim") -> None:
        model, sep, gpu = pool.rpartition("@")
        if not sep or not model or not gpu:
            raise ValueError(f"pool must look like MODEL@GPU, got {pool!r}")
        if notice_lead_s < 0:
            raise ValueError("the notice lead time must not be negative")
        self.pool = pool
        self.cfg = cfg
        self.notice_lead_s = notice_lead_s
        # Worker ids outlive a run in the read models: a fresh token per provider keeps runs apart.
        self.prefix = f"{name_prefix}-{uuid.uuid4().hex[:6]}"
        self._lock = threading.Lock()
        self._live: dict[str, tuple[SimWorker, float]] = {}  # id -> worker, wall-clock start
        self._draining: set[str] = set()
        self._notices: list[str] = []
        self._tasks: set[asyncio.Task] = set()
        self.made = 0
        self.notices_given = 0
        self.ended: Counter[str] = Counter()  # why workers ended: drained, died, stopped
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sim-workers", daemon=True)
        self._thread.start()
        self._sh: Shared = self._call(self._open(gateway_url, worker_key, model, gpu))
        self._closed = False

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self, url: str, key: str, model: str, gpu: str) -> Shared:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return Shared(cfg=self.cfg, base_url=url.rstrip("/"), worker_key=key, tenant_keys={}, model=model,
                      gpu_type=gpu, session=session, rng=random.Random(self.cfg.seed))

    # -- Provider ---------------------------------------------------------------------------------------------

    def workers(self) -> list[Worker]:
        with self._lock:
            live = [(wid, started) for wid, (_, started) in self._live.items()]
            draining = set(self._draining)
        return [Worker(wid, wid in draining, started) for wid, started in sorted(live, key=lambda x: x[1])]

    def add(self, n: int) -> list[str]:
        return self._call(self._spawn(n)) if n > 0 else []

    def drain(self, worker_id: str) -> None:
        with self._lock:
            entry = self._live.get(worker_id)
            if entry is None:
                return
            self._draining.add(worker_id)
        self._loop.call_soon_threadsafe(entry[0].drain)

    def notices(self) -> list[str]:
        with self._lock:
            out, self._notices = self._notices, []
        return out

    def close(self, timeout: float = 30.0) -> None:
        """Drain every worker (jobs in hand are checkpointed and released), wait up to `timeout`, then stop
        whatever is left and the loop."""
        if self._closed:
            return
        self._closed = True
        for w in self.workers():
            self.drain(w.worker_id)
        deadline = time.monotonic() + timeout
        while self.workers() and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            self._call(self._stop(), timeout=timeout + 30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    # -- what happened ----------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        sh = self._sh
        attempts = Counter(a.outcome for a in list(sh.attempts))
        lives = list(sh.lives)
        with self._lock:
            live = len(self._live)
        return {"workers_made": self.made, "workers_live": live, "workers_ended": dict(self.ended),
                "notices": self.notices_given, "attempts_by_outcome": dict(attempts),
                "jobs_completed": attempts.get("completed", 0),
                "gpu_seconds_billed": round(sum(w.billed_s for w in lives), 1),
                "gpu_seconds_busy": round(sum(w.busy_s for w in lives), 1)}

    def attempts(self) -> list[Attempt]:
        """Every lease a worker of this provider held, as the worker lived it."""
        return list(self._sh.attempts)

    # -- on the loop thread -----------------------------------------------------------------------------------

    async def _spawn(self, n: int) -> list[str]:
        started = []
        for _ in range(n):
            self.made += 1
            wid = f"{self.prefix}-{self.made}"
            worker = SimWorker(self._sh, wid, on_notice=self._noticed, notice_lead_s=self.notice_lead_s)
            with self._lock:
                self._live[wid] = (worker, time.time())
            task = self._loop.create_task(worker.live())
            self._tasks.add(task)
            task.add_done_callback(lambda t, w=worker: self._ended(t, w))
            started.append(wid)
        return started

    def _noticed(self, worker_id: str) -> None:
        with self._lock:
            self._notices.append(worker_id)
            self.notices_given += 1

    def _ended(self, task: asyncio.Task, worker: SimWorker) -> None:
        self._tasks.discard(task)
        with self._lock:
            self._live.pop(worker.id, None)
            self._draining.discard(worker.id)
            self.ended[worker.end or "failed"] += 1
        if not task.cancelled() and task.exception() is not None:
            log.error("simulated worker %s failed", worker.id, exc_info=task.exception())

    async def _stop(self) -> None:
        self._sh.stopping.set()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=30)
        await self._sh.session.close()
