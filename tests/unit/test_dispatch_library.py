"""The shared dispatch library's pure parts: where a RequestWork goes, what a verdict tells the holder, and
how the listener routes a record to whoever waits for it (records built here; the Kafka side is covered by
the gateway's and the Kafka transport's integration tests)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch import verdicts
from spotreel.dispatch.listener import DispatchListener
from spotreel.dispatch.order import PoolQueues, request_order
from spotreel.domain import events as ev
from spotreel.domain.spec import RenderSpec
from spotreel.config.settings import Settings


@given(st.text(min_size=1, max_size=20), st.integers(1, 12), st.lists(st.integers(0, 11)), st.sets(st.integers(0, 11)))
def test_every_partition_not_skipped_is_asked_once_hinted_first(worker_id, n, hinted, skip) -> None:
    order = request_order(worker_id, n, hinted, skip)
    assert sorted(order) == sorted(set(range(n)) - skip)
    hinted_ok = list(dict.fromkeys(p for p in hinted if p < n and p not in skip))
    assert order[:len(hinted_ok)] == hinted_ok
    if not hinted_ok and partition_for(worker_id, n) not in skip:
        assert order[0] == partition_for(worker_id, n)  # no hint: the ring starts at the worker's own


def test_queues_rank_partitions_by_queued_work_of_the_workers_models_only() -> None:
    q = PoolQueues()
    for pool, part, queued in [("m1@cpu", 0, 2), ("m1@gpu", 2, 5), ("m2@cpu", 1, 9), ("m1@cpu", 3, 0)]:
        q.record(SimpleNamespace(pool=pool, partition=part, queued=queued))
    assert q.partitions_with_work(("m1",)) == [2, 0]
    assert q.partitions_with_work(("m1", "m2")) == [1, 2, 0]
    q.record(SimpleNamespace(pool="m1@gpu", partition=2, queued=0))  # the latest stats replace the older
    assert q.partitions_with_work(("m1",)) == [0]


def test_queues_rank_the_smallest_fair_share_first_then_the_most_queued() -> None:
    """`min_share`: the tenant furthest below its share over all partitions (scheduler/fairshare.py) is
    served first wherever its jobs are; a partition without one (older scheduler, tenants at their ceiling)
    comes after those with one."""
    q = PoolQueues()
    for part, queued, min_share in [(0, 40, 12.0), (1, 1, 0.0), (2, 30, None), (3, 5, 12.0), (4, 0, 0.0)]:
        q.record(SimpleNamespace(pool="m1@cpu", partition=part, queued=queued, min_share=min_share))
    assert q.partitions_with_work(("m1",)) == [1, 0, 3, 2]
    # Another pool of the worker's models with a smaller share on partition 3.
    q.record(SimpleNamespace(pool="m2@cpu", partition=3, queued=2, min_share=4.0))
    assert q.partitions_with_work(("m1", "m2")) == [1, 3, 0, 2]
    assert q.partitions_with_work(("m1",)) == [1, 0, 3, 2]


def _renewed(cancel: bool, drain: bool) -> ev.LeaseRenewed:
    return ev.LeaseRenewed("j1", 4, 1000, "c1", 2, 31_000, cancel_requested=cancel, drain_requested=drain)


def test_a_renewal_verdict_carries_instructions_and_other_verdicts_none() -> None:
    assert verdicts.instructions(_renewed(True, False)) == {"cancel": True, "drain": False,
                                                           "lease_expires_at_ms": 31_000}
    assert verdicts.instructions(None) is None
    assert verdicts.pace(_renewed(False, False), 0.2, 30_000) is None
    assert verdicts.pace(_renewed(False, False), 2.0, 30_000) == 10.0  # slow: a third of the TTL
    assert verdicts.pace(None, 10.0, 30_000) == 10.0  # pending


class _Msg:
    def __init__(self, topic: str, key: bytes | None, value: bytes | None, headers: list | None = None) -> None:
        self._t, self._k, self._v, self._h = topic, key, value, headers

    def headers(self) -> list | None:
        return self._h

    def topic(self) -> str:
        return self._t

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v


def test_the_listener_routes_answers_verdicts_and_observed_events_and_decodes_nothing_unwanted() -> None:
    codec = Codec.default()
    lis = DispatchListener(Settings.from_env(), codec, name="unit")
    got: dict[str, list] = {"answer": [], "verdict": [], "seen": []}
    lis.on_answer("rw-1", got["answer"].append)
    lis.on_verdict("c1", "j1", got["verdict"].append)
    event = _renewed(False, True)
    lis._route(_Msg(lis.events, b"j1", codec.encode_message(event)))
    lis._route(_Msg(lis.events, b"j1", codec.encode_message(event)))  # settled once only
    assert got["verdict"] == [event]
    # A record of a job nobody waits on is not even decoded.
    lis._route(_Msg(lis.events, b"j9", b"not avro at all"))
    lis.observe("j2", got["seen"].append)
    cancel = ev.CancelRequested("j2", 5, 2000, "c9", "user", 3)
    lis._route(_Msg(lis.events, b"j2", codec.encode_message(cancel)))
    assert got["seen"] == [cancel]
    lis.drop_verdict("c1", "j1")
    lis._route(_Msg(lis.events, b"j1", b"not avro at all"))  # interest gone with the last waiter
    answer = ev.NoWorkAvailable("rw-1", "w1", 3000, "no_work", 2)
    lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(answer)))
    lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(answer)))  # every answer until dropped
    assert got["answer"] == [answer, answer]
    lis.drop_answer("rw-1")
    lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(answer)))
    assert len(got["answer"]) == 2



def test_the_listener_hands_on_a_grant_once_however_often_it_is_answered() -> None:
    """After a rebalance the scheduler answers a RequestWork it had granted again, with the same grant: a
    Kafka worker rendering under the first copy must not see the second (it would release its own lease as
    unclaimed). A different grant to the same request is handed on; a dropped request hears nothing."""
    codec = Codec.default()
    lis = DispatchListener(Settings.from_env(), codec, name="unit")
    got: list = []
    lis.on_answer("rw-1", got.append)
    spec = RenderSpec("m", "a fox", 2.0, "64x64", 8, 7, 20)
    grant = ev.WorkAssigned("rw-1", "w1", "j1", 1, 1, 1000, 30_000, 31_000, "m@cpu", "cpu", spec)
    for _ in range(3):
        lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(grant)))
    assert got == [grant]
    other = ev.WorkAssigned("rw-1", "w1", "j2", 1, 1, 2000, 30_000, 32_000, "m@cpu", "cpu", spec)
    lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(other)))
    assert got == [grant, other]
    lis.drop_answer("rw-1")
    lis.on_answer("rw-1", got.append)  # registered anew: nothing remembered from before
    lis._route(_Msg(lis.assignments, b"w1", codec.encode_message(grant)))
    assert got == [grant, other, grant]

def test_the_dispatch_library_imports_no_service_and_no_worker() -> None:
    """import-linter cannot see `spotreel.services` / `spotreel.worker` (mapped from other folders), so this
    walks the library's imports itself."""
    import ast
    from pathlib import Path

    import spotreel.dispatch

    found = []
    for path in Path(spotreel.dispatch.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path.name, n) for n in names if n.startswith(("spotreel.services", "spotreel.worker"))]
    assert found == []
