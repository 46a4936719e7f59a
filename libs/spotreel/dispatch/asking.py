"""Which partition an idle worker asks for work, and when: idle workers must not stampede the scheduler.

If every idle poll asked the partitions the pool stats hint, then the whole ring, and again as soon as a
stats record (one per partition and pool every second, stale for up to that second) still showed queued
work, a mostly idle fleet would send dozens of RequestWork per job. Each RequestWork is a Kafka record, a
scheduler decision and an answer: idle workers would cost more than busy ones
(docs/decisions/0005-idle-workers-take-turns.md has the figures).

`Asking` is the policy of one process that speaks for many idle workers (a gateway). Pure: the caller gives
the stats (`order.WorkView`) and the time; it counts the requests that are out.

- **Hinted partitions within their queue.** A partition whose stats show queued work for the worker's
  models is asked, in the stats' order (highest tier, smallest share, most queued), by at most as many
  requests of this process at once as it shows queued jobs.
- **A refusal holds until the stats move.** A partition that answered "no queued job" is not asked again for
  the same models until its stats version changes (`PoolQueues` bumps it when what the partition shows
  changes, not on every identical tick).
- **Scouts for the silent.** A partition that never published stats (a fresh deployment, a scheduler that
  does not publish them) gets one request of this process at a time, at most once per `scout_s`.
- **Presence.** Every idle worker asks its own partition (`partition_for`) at least every `presence_s`, work
  in sight or not: the scheduler learns of idle workers only from their requests (pool stats'
  `idle_workers`, and the free workers that spare a lease from preemption, over a 15 s window).
  A process that vouches for its idle workers in its pulses (the gateway: `GatewayPulse.idle`) sets
  `presence_by_pulse`: their presence takes no request; `vouched` counts the pulse as their ask.
- **Held for a match.** An answer `held_for_match` (the partition keeps its job for another idle worker
  that can resume it exactly, for a bounded time: domain/resume_match.py) is no refusal of the partition:
  the other workers may ask it; the one answered so waits HELD_S before asking it again.
Everything else waits for a change: new stats, an answer that frees a slot, or its presence coming due.
A worker asks at most one partition at a time (the lease desk waits for its unanswered request).

- **A share of the crowd, for a process of one worker** (`crowd_asks`). A Kafka worker is a process of its
  own: its `Asking` counts only its own requests, so "at most as many requests as queued jobs" would hold
  per worker, and every idle worker of the fleet would ask a hinted partition each time its stats changed
  (over a hundred requests a lease at the Kafka peak: docs/decisions/0005). Such a worker asks a hinted
  partition with the chance `crowd_asks` x (its queued jobs not asked for by this process) / (the idle
  workers of its models the stats count), capped at 1, drawn again
  at every change and every pass: about `crowd_asks` requests per queued job from the whole crowd, and none
  of them needs another worker's count. A worker that draws no ask waits as any idle worker does (next
  change, next pass, its presence). None (the gateway's): the process speaks for all of its workers and
  its own count is the crowd's.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.dispatch.order import WorkView

# Half the scheduler's free-worker window (services/scheduler/preempting.py FREE_WINDOW_MS, 15 s): two asks
# per window, so one answer that is late (a loaded partition) does not make an idle worker look gone.
PRESENCE_S = 7.5
REFUSED = "no_queued_job"
# The partition keeps its queued job for another idle worker that can resume it exactly (domain/
# resume_match.py): the other workers may still ask there, this one not for HELD_S (the hold is bounded, so
# it asks again and gets the job once the hold is over).
HELD = "held_for_match"
HELD_S = 1.0
# A Kafka worker's `crowd_asks`: two requests per queued job from the crowd, so one lost to a stale view or
# to another partition's grant still leaves a good chance the job is asked for in the same round.
CROWD_ASKS = 2.0


@dataclass
class _Out:
    partition: int
    models: tuple[str, ...]
    at: float
    worker_id: str = ""


@dataclass
class Asking:
    partitions: int
    presence_s: float = PRESENCE_S
    scout_s: float = 1.0
    stale_s: float = 30.0  # an answer this late is not coming (the partition's owner is gone)
    _out: dict[str, _Out] = field(default_factory=dict)  # request id -> where it went, oldest first
    _per_partition: Counter[int] = field(default_factory=Counter)
    _refused: dict[tuple[int, tuple[str, ...]], int] = field(default_factory=dict)  # -> version refused at
    _last_ask: dict[str, float] = field(default_factory=dict)  # worker -> when it last asked, oldest first
    _scouted: dict[int, float] = field(default_factory=dict)
    _held: dict[tuple[str, int], float] = field(default_factory=dict)  # (worker, partition) -> asks again after
    # A process of one worker among many (a Kafka worker): the requests per queued job the crowd aims at.
    crowd_asks: float | None = None
    rng: random.Random = field(default_factory=random.Random)
    # Presence comes in this process's pulses (`vouched`), not by asking: set once it pulses.
    presence_by_pulse: bool = False

    def pick(self, worker_id: str, models: tuple[str, ...], view: WorkView, now: float) -> int | None:
        """The partition this worker should ask now, or None to wait for a change."""
        self._expire(now)
        for p in view.hinted:
            if self._asked_out(p, models, view) or not 0 <= p < self.partitions:
                continue
            if self._held and self._held.get((worker_id, p), -math.inf) > now:
                continue
            left = view.queued.get(p, 0) - self._per_partition[p]
            if left > 0 and (self.crowd_asks is None or self._drawn(left, view.idle)):
                return p
        home = partition_for(worker_id, self.partitions)
        for i in range(self.partitions):
            p = (home + i) % self.partitions
            if (p not in view.known and self._per_partition[p] == 0
                    and now - self._scouted.get(p, -math.inf) >= self.scout_s):
                return p
        if not self.presence_by_pulse and now - self._last_ask.get(worker_id, -math.inf) >= self.presence_s:
            return home
        return None

    def _drawn(self, left: int, idle: int) -> bool:
        """Whether this worker of a crowd of `idle` asks for one of `left` queued jobs (crowd_asks)."""
        assert self.crowd_asks is not None
        chance = self.crowd_asks * left / idle if idle > 0 else 1.0
        return chance >= 1.0 or self.rng.random() < chance

    def free(self, models: tuple[str, ...], view: WorkView) -> int:
        """How many requests for these models the hinted partitions still take (scouts and presence not
        counted): 0 means no waiting poll of these models can go before something changes."""
        return sum(max(0, view.queued.get(p, 0) - self._per_partition[p]) for p in view.hinted
                   if 0 <= p < self.partitions and not self._asked_out(p, models, view))

    def next_due(self, worker_id: str, now: float) -> float:
        """Seconds until this worker's presence is due (0 when it is)."""
        return max(0.0, self._last_ask.get(worker_id, -math.inf) + self.presence_s - now)

    def vouched(self, worker_id: str, now: float) -> None:
        """The worker's presence went out in a pulse: it counts as its ask (no request is out)."""
        self._last_ask.pop(worker_id, None)
        self._last_ask[worker_id] = now

    def sent(self, request_id: str, worker_id: str, partition: int, models: tuple[str, ...], now: float) -> None:
        """Count the request `request_id` (unique everywhere: the scheduler remembers grants by it) to
        `partition` as out."""
        self._out[request_id] = _Out(partition, models, now, worker_id)
        self._per_partition[partition] += 1
        self._scouted[partition] = now
        self._last_ask.pop(worker_id, None)
        self._last_ask[worker_id] = now

    def models_of(self, request_id: str) -> tuple[str, ...] | None:
        """The models of a request still counted as out; None when it is not (answered, expired, unknown)."""
        out = self._out.get(request_id)
        return None if out is None else out.models

    def answered(self, request_id: str, answer: Any, view: WorkView | None = None) -> bool:
        """An answer (WorkAssigned or NoWorkAvailable) or a send that failed (`answer` None) came for a
        request: its slot is free. A "no queued job" refusal holds the partition for those models until its
        stats change. True when the slot was still counted."""
        out = self._out.pop(request_id, None)
        if out is None:
            return False
        self._release(out.partition)
        reason = getattr(answer, "reason", None)
        if reason == REFUSED and view is not None:
            self._refused[(out.partition, out.models)] = view.versions.get(out.partition, 0)
        elif reason == HELD:
            self._held[(out.worker_id, out.partition)] = out.at + HELD_S
        return True

    def _asked_out(self, p: int, models: tuple[str, ...], view: WorkView) -> bool:
        at = self._refused.get((p, models))
        return at is not None and at == view.versions.get(p, 0)

    def _release(self, p: int) -> None:
        self._per_partition[p] -= 1
        if self._per_partition[p] <= 0:
            del self._per_partition[p]

    def _expire(self, now: float) -> None:
        while self._out:
            request_id, out = next(iter(self._out.items()))
            if now - out.at < self.stale_s:
                break
            del self._out[request_id]
            self._release(out.partition)
        for key in [k for k, until in self._held.items() if until <= now]:
            del self._held[key]
        # Workers not heard of for long are forgotten (their next poll is a first one).
        while self._last_ask:
            worker_id, at = next(iter(self._last_ask.items()))
            if now - at < 20 * self.presence_s:
                break
            del self._last_ask[worker_id]
