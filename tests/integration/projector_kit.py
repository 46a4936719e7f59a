"""Shared by the projector's integration and chaos tests: realistic histories on a topic, table dumps."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable

from confluent_kafka import Producer

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from spotreel.platform.migrate import migrate
from spotreel.services.projector import job_rows as jr
from spotreel.services.projector.store import PROJECTED_TABLES
from spotreel.config.settings import Settings
from tests.unit.projection_histories import ACTIONS, history

# Weighted towards a normal run: lease, progress, checkpoint, then an ending.
_WEIGHTS = {"grant": 4, "progress": 6, "checkpoint": 3, "renew": 2, "complete": 1, "release": 1, "expire": 1,
            "fail": 1, "cancel": 0.3, "pause": 0.3, "resume": 0.5, "requeue": 0.3, "stale": 0.5}


def make_histories(n_jobs: int, events_per_job: int, seed: int = 7) -> list[list[Any]]:
    rnd = random.Random(seed)
    actions = [a for a in ACTIONS if a in _WEIGHTS]
    weights = [_WEIGHTS[a] for a in actions]
    out = []
    for i in range(n_jobs):
        steps = [(a, float(rnd.randint(0, 100)), rnd.randint(0, 30))
                 for a in rnd.choices(actions, weights, k=events_per_job)]
        out.append(history(f"key-{i}", steps, tenant=f"tenant-{i % 3}", now=1_700_000_000_000 + i * 10))
    return out


def interleave(histories: list[list[Any]], seed: int = 3) -> list[Any]:
    """One stream as the scheduler would write it: each job's events in order, jobs interleaved."""
    rnd = random.Random(seed)
    queues = [list(h) for h in histories]
    out = []
    while any(queues):
        q = rnd.choice([q for q in queues if q])
        out.append(q.pop(0))
    return out


def produce(bootstrap: str, topic: str, stream: list[Any], garbage_at: tuple[int, ...] = ()) -> int:
    codec = Codec.default()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    n = 0
    for i, event in enumerate(stream):
        if i in garbage_at:
            producer.produce(topic, key=b"garbage", value=b"\x00not avro at all")
            n += 1
        producer.produce(topic, key=event.job_id.encode(), value=codec.encode_message(event))
        n += 1
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return n


def isolated(settings: Settings, unique: str) -> Settings:
    return replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique)


def prepare_keyspace(cql, keyspace: str) -> None:
    migrate(cql, keyspace, say=lambda *_: None)


def projector_lane(settings: Settings, unique: str, cql, make_topic: Callable[..., str],
                   partitions: int) -> tuple[Settings, str]:
    """The test's own settings, its migrated keyspace and its events topic with the dead-letter topic beside
    it; the settings and the events topic's name."""
    s = isolated(settings, unique)
    prepare_keyspace(cql, unique)
    topic = make_topic("events", partitions=partitions)
    make_topic("events.deadletter")
    return s, topic


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.replace(tzinfo=value.tzinfo or timezone.utc).timestamp() * 1000)
    return value


def dump(cql, keyspace: str) -> dict[str, list[tuple]]:
    """Every row of every projected table, sorted, cells with their write timestamps left out."""
    out = {}
    for table in PROJECTED_TABLES:
        rows = []
        for r in cql.execute(f"SELECT * FROM {keyspace}.{table}"):
            d = r._asdict()
            if table == "pool_stats":
                d.pop("updated_at", None)  # when it was counted, not what
            rows.append(tuple(sorted((k, _plain(v)) for k, v in d.items())))
        out[table] = sorted(rows, key=repr)
    return out


def assert_tables_are_the_fold(cql, keyspace: str, histories: list[list[Any]]) -> None:
    jobs = {r.job_id: r._asdict() for r in cql.execute(f"SELECT * FROM {keyspace}.jobs_by_id")}
    assert len(jobs) == len(histories)
    events = {}
    for r in cql.execute(f"SELECT job_id, version, event_type FROM {keyspace}.events_by_job"):
        events.setdefault(r.job_id, []).append((r.version, r.event_type))
    rejections = {}
    for r in cql.execute(f"SELECT job_id, version, command_id FROM {keyspace}.rejections_by_job"):
        rejections.setdefault(r.job_id, set()).add((r.version, r.command_id))
    tenant_rows = {r.job_id: r for r in cql.execute(f"SELECT * FROM {keyspace}.jobs_by_tenant")}
    live = {r.job_id: r.status for r in cql.execute(f"SELECT * FROM {keyspace}.pool_jobs")}
    tenant_live = {r.job_id: (r.tenant_id, r.status) for r in cql.execute(f"SELECT * FROM {keyspace}.tenant_live_jobs")}
    for h in histories:
        state = fold(h)
        row = {k: _plain(v) for k, v in jobs[state.job_id].items()}
        expected = jr.job_row(state)
        diffs = {k: (row.get(k), v) for k, v in expected.items() if row.get(k) != v}
        assert not diffs, f"{state.job_id}: (table, fold) {diffs}"
        accepted = [(e.version, type(e).__name__) for e in h if not isinstance(e, ev.CommandRejected)]
        assert sorted(events[state.job_id]) == accepted
        assert rejections.get(state.job_id, set()) == {(e.version, e.command_id) for e in h
                                                        if isinstance(e, ev.CommandRejected)}
        t = tenant_rows[state.job_id]
        assert (t.status, t.version, t.priority) == (state.status, state.version, state.priority)
        assert live.get(state.job_id) == (None if state.is_terminal else state.status)
        assert tenant_live.get(state.job_id) == (None if state.is_terminal else (state.tenant, state.status))
