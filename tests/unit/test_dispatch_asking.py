"""Idle workers take turns asking partitions for work (dispatch/asking.py, gateway idlepolls.py)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.adapters.partitioning import partition_for
from spotreel.dispatch.asking import CROWD_ASKS, Asking
from spotreel.dispatch.order import PoolQueues, WorkView
from spotreel.services.gateway.worker_api.idlepolls import IdlePolls
from tests.harness.hypothesis_profiles import examples

M = ("m",)
N = 6


def view(queued: dict[int, int], versions: dict[int, int] | None = None, known=range(N), idle: int = 0) -> WorkView:
    hinted = tuple(sorted((p for p, n in queued.items() if n > 0), key=lambda p: -queued[p]))
    return WorkView(hinted, queued, versions or {}, frozenset(known), idle)


def refused(partition: int) -> SimpleNamespace:
    return SimpleNamespace(reason="no_queued_job", partition=partition)


def test_a_hinted_partition_is_asked_by_at_most_as_many_requests_as_it_queues() -> None:
    a, v = Asking(N), view({2: 3})
    picks = []
    for i in range(50):
        w = f"w{i}"
        a.sent(f"r{i}", w, 0, M, 0.0)  # every worker asked a moment ago: no presence due
        p = a.pick(w, M, v, 1.0)
        if p is not None:
            a.sent(f"x{i}", w, p, M, 1.0)
            picks.append(p)
    assert picks == [2, 2, 2]
    assert a.free(M, v) == 0
    a.answered("x0", SimpleNamespace(reason=None))  # a grant frees its slot
    assert a.free(M, v) == 1 and a.pick("w0", M, v, 1.1) == 2


def test_a_refusal_holds_the_partition_until_its_stats_change() -> None:
    a = Asking(N)
    a.sent("r0", "w", 4, M, 0.0)
    a.answered("r0", refused(4), view({4: 5}, {4: 7}))
    assert a.pick("w", M, view({4: 5}, {4: 7}), 1.0) is None  # the same stats: stale, do not ask again
    assert a.free(M, view({4: 5}, {4: 7})) == 0
    assert a.pick("w", M, view({4: 5}, {4: 8}), 1.0) == 4  # they moved: ask again
    assert a.pick("w", ("other",), view({4: 5}, {4: 7}), 1.0) == 4  # the refusal was for other models


def test_a_worker_with_nothing_in_sight_asks_only_its_own_partition_every_presence_interval() -> None:
    a, v = Asking(N, presence_s=5.0), view({})
    home = partition_for("w", N)
    asked = []
    t = 0.0
    while t < 30.0:
        p = a.pick("w", M, v, t)
        if p is not None:
            a.sent(f"r{t}", "w", p, M, t)
            a.answered(f"r{t}", refused(p), v)
            asked.append((t, p))
        t = round(t + 0.1, 1)
    assert [p for _, p in asked] == [home] * 6
    assert all(b - a_ >= 5.0 for (a_, _), (b, _) in zip(asked, asked[1:]))
    assert a.next_due("w", 27.0) == 3.0


def test_silent_partitions_are_scouted_one_request_at_a_time() -> None:
    a, v = Asking(N, scout_s=1.0), view({}, known={0, 1, 2, 3})
    first = [a.pick(f"w{i}", M, v, 0.0) for i in range(3)]
    assert first[0] in (4, 5)
    a.sent("s1", "w0", first[0], M, 0.0)
    second = a.pick("w1", M, v, 0.0)
    assert second in (4, 5) and second != first[0]
    a.sent("s2", "w1", second, M, 0.0)
    a.sent("p", "w2", 0, M, 0.0)
    assert a.pick("w2", M, v, 0.5) is None  # both scouted, w2's presence is not due
    a.answered("s1", refused(first[0]), v)
    assert a.pick("w2", M, v, 0.5) is None  # within scout_s
    assert a.pick("w2", M, v, 1.0) == first[0]


def test_a_request_never_answered_stops_counting_after_stale_s() -> None:
    a, v = Asking(N, stale_s=30.0, presence_s=60.0), view({1: 1})
    a.sent("r", "w0", 1, M, 0.0)
    a.sent("q", "w1", 3, M, 0.0)
    assert a.pick("w1", M, v, 29.0) is None
    assert a.pick("w1", M, v, 30.0) == 1


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 19), st.dictionaries(st.integers(0, N - 1), st.integers(0, 4)),
                          st.booleans()), max_size=60))
def test_requests_out_never_exceed_the_queue_but_for_presence_and_scouts(ops) -> None:
    """Whatever the stats say over time, a hinted partition never has more requests out than it queues,
    plus the presence asks that land there and scouts; and every request is counted until answered."""
    a = Asking(N, presence_s=5.0)
    out: dict[str, tuple[int, str]] = {}
    t = 0.0
    for i, (worker, queued, answer_one) in enumerate(ops):
        t += 0.5
        v = view(queued, {p: i for p in range(N)})
        w = f"w{worker}"
        p = a.pick(w, M, v, t)
        if p is not None:
            why = "hinted" if p in v.hinted and sum(1 for q, _ in out.values() if q == p) < queued.get(p, 0) \
                else "presence" if p == partition_for(w, N) else "scout"
            assert why != "scout", (p, v)  # every partition publishes here: nothing to scout
            a.sent(f"r{i}", w, p, M, t)
            out[f"r{i}"] = (p, why)
        if answer_one and out:
            rid = next(iter(out))
            assert a.answered(rid, refused(out.pop(rid)[0]), v)
        per = Counter(p for p, _ in out.values())
        assert dict(per) == {p: n for p, n in a._per_partition.items() if n}  # noqa: SLF001


def _idle_polls() -> tuple[PoolQueues, IdlePolls]:
    """Every partition's stats showing nothing queued, and a gateway's idle polls reading them."""
    queues = PoolQueues()
    for p in range(N):
        queues.record(SimpleNamespace(pool="m@gpu", partition=p, queued=0))
    ids = iter(range(10_000))
    return queues, IdlePolls(Asking(N, presence_s=60.0), queues.view, lambda: str(next(ids)), clock=lambda: 1.0)


async def test_a_change_wakes_only_as_many_waiting_polls_as_may_go() -> None:
    queues, polls = _idle_polls()
    for i in range(20):  # every worker just asked (its presence is not due)
        polls.asking.sent(f"seed{i}", f"w{i}", 0, M, 0.0)
    queues.on_change = polls.stats_changed
    tasks = [asyncio.create_task(polls.next(f"w{i}", M, 0.8)) for i in range(20)]
    await asyncio.sleep(0.05)
    assert polls.waiting == 20
    queues.record(SimpleNamespace(pool="m@gpu", partition=3, queued=2))  # two jobs queue at partition 3
    await asyncio.sleep(0.01)
    assert polls.waiting == 18
    got = [t.result() for t in tasks if t.done()]
    assert [p for p, _ in got] == [3, 3] and len({rid for _, rid in got}) == 2
    polls.answered(got[0][1], SimpleNamespace(reason=None))  # one was granted: its slot is free again
    await asyncio.sleep(0.01)
    assert polls.waiting == 17
    done = await asyncio.gather(*tasks)
    assert sum(1 for d in done if d is not None) == 3


def test_stats_versions_move_only_when_what_a_partition_shows_changes() -> None:
    changes = []
    queues = PoolQueues(on_change=lambda: changes.append(1))
    tick = SimpleNamespace(pool="m@gpu", partition=2, queued=1, min_share=0.5, queued_by_tier=("5=1",))
    queues.record(tick)
    queues.record(tick)  # the next second's identical record
    first = queues.view(M)
    assert first.versions[2] == 1 and len(changes) == 1 and first.known == frozenset({2})
    assert first.hinted == (2,) and first.queued == {2: 1}
    queues.record(SimpleNamespace(pool="m@gpu", partition=2, queued=0, min_share=None, queued_by_tier=()))
    assert queues.view(M).versions[2] == 2 and len(changes) == 2 and queues.view(M).hinted == ()


async def test_a_replaced_poll_ends_a_timed_out_one_asks_again_and_a_cancelled_woken_one_frees_its_slot() -> None:
    queues, polls = _idle_polls()
    polls.asking.sent("seed", "w", 0, M, 0.0)
    queues.on_change = polls.stats_changed
    first = asyncio.create_task(polls.next("w", M, 5.0))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(polls.next("w", M, 0.05))  # the same worker polls again: the first gives way
    assert await first is None
    assert await second is None and polls.waiting == 0  # its wait ran out with nothing in sight
    woken = asyncio.create_task(polls.next("w", M, 5.0))
    await asyncio.sleep(0.01)
    queues.record(SimpleNamespace(pool="m@gpu", partition=2, queued=1))
    woken.cancel()  # woken and cancelled before it ran: the request was never sent
    try:
        await woken
    except asyncio.CancelledError:
        pass
    assert polls.asking.free(M, queues.view(M)) == 1, "the slot counted for the woken poll is free again"
    assert polls.waiting == 0


# -- a crowd of one-worker processes (Kafka workers) -------------------------------------------------------

def _crowd(n: int, crowd_asks: float | None, seed: int = 5) -> list[Asking]:
    """n Kafka workers, each its own process with its own policy; each asked its home a moment ago (no
    presence due), as idle workers of a running fleet have."""
    rng = random.Random(seed)
    crowd = []
    for i in range(n):
        a = Asking(N, crowd_asks=crowd_asks, rng=rng)
        a.sent(f"home{i}", f"w{i}", partition_for(f"w{i}", N), M, 0.0)
        a.answered(f"home{i}", refused(partition_for(f"w{i}", N)), view({}, {p: 1 for p in range(N)}))
        crowd.append(a)
    return crowd


def _asks(crowd: list[Asking], v: WorkView, now: float) -> Counter:
    return Counter(a.pick(f"w{i}", M, v, now) for i, a in enumerate(crowd))


def test_a_crowd_of_kafka_workers_asks_about_twice_per_queued_job_not_once_each() -> None:
    # 2,000 idle workers, each its own process, see one stats change: three jobs queued on partition 2.
    v = view({2: 3}, {p: 2 for p in range(N)}, idle=2000)
    stampede = _asks(_crowd(2000, None), v, 1.0)
    assert stampede[2] == 2000  # each worker's own count allows it three requests: every one asks
    crowd = _crowd(2000, CROWD_ASKS)
    # The same view met again at 200 wake-ups within the presence interval (no presence due).
    rounds = [_asks(crowd, v, 1.0 + r * 0.025)[2] for r in range(200)]
    mean = sum(rounds) / len(rounds)
    assert 5.0 <= mean <= 7.0, mean  # CROWD_ASKS x 3 queued jobs = 6 expected asks a round
    assert max(rounds) <= 20 and sum(1 for r in rounds if r == 0) <= 2, rounds
    # Nothing else is asked in those rounds: no presence was due and every partition published stats.
    assert set(_asks(crowd, v, 2.0)) <= {2, None}


def test_a_worker_asks_for_sure_when_the_crowd_is_small_or_not_counted_yet() -> None:
    for idle in (0, 1, 6):  # 0: no stats counted idle workers yet; 6 <= CROWD_ASKS x 3 queued jobs
        crowd = _crowd(10, CROWD_ASKS)
        assert _asks(crowd, view({2: 3}, {p: 2 for p in range(N)}, idle=idle), 1.0)[2] == 10, idle


def test_a_crowd_worker_never_asks_past_its_own_count_or_a_refusal() -> None:
    a = Asking(N, crowd_asks=CROWD_ASKS, rng=random.Random(1))
    a.sent("home", "w", partition_for("w", N), M, 0.0)
    v = view({2: 1}, {2: 4}, idle=1)  # alone: the chance is 1
    assert a.pick("w", M, v, 1.0) == 2
    a.sent("r1", "w", 2, M, 1.0)
    assert a.pick("w", M, v, 1.1) is None  # its one request for the one queued job is out
    a.answered("r1", refused(2), v)
    assert a.pick("w", M, v, 1.2) is None  # refused at version 4: not again until the stats move
    assert a.pick("w", M, view({2: 1}, {2: 5}, idle=1), 1.3) == 2


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 50), st.integers(1, 5000), st.floats(0.5, 4.0), st.integers(0, 2**32 - 1))
def test_a_crowd_workers_chance_is_its_share_capped_at_one(left, idle, crowd_asks, seed) -> None:
    a = Asking(N, crowd_asks=crowd_asks, rng=random.Random(seed))
    draws = [a._drawn(left, idle) for _ in range(400)]
    chance = min(1.0, crowd_asks * left / idle)
    if chance >= 1.0:
        assert all(draws)
    else:  # 400 draws: within six standard deviations of the chance (or exactly none for a tiny one)
        sd = (chance * (1 - chance) / 400) ** 0.5
        assert abs(sum(draws) / 400 - chance) <= 6 * sd + 1e-9, (chance, sum(draws))


def test_the_view_counts_the_idle_workers_of_its_models_over_every_partition() -> None:
    queues = PoolQueues()
    for p, idle in ((0, 700), (1, 650), (3, 40)):
        queues.record(SimpleNamespace(pool="m@gpu", partition=p, queued=0, min_share=None, queued_by_tier=(),
                                      idle_workers=idle))
    queues.record(SimpleNamespace(pool="other@gpu", partition=0, queued=2, min_share=None, queued_by_tier=(),
                                  idle_workers=900))
    queues.record(SimpleNamespace(pool="m@gpu", partition=1, queued=1, min_share=None, queued_by_tier=(),
                                  idle_workers=600))  # the newest record of a partition replaces its count
    assert queues.view(M).idle == 700 + 600 + 40
    assert queues.view(("other",)).idle == 900 and queues.view(("m", "other")).idle == 2240
    # A scheduler older than the count (no idle_workers field) counts as none.
    queues.record(SimpleNamespace(pool="m@gpu", partition=3, queued=0, min_share=None, queued_by_tier=()))
    assert queues.view(M).idle == 1300
