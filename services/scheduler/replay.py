"""Incident review from the events topic alone: a job's timeline, and a full rebuild of the scheduler's
state compared with what its table (the compacted changelog) holds."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from spotreel.runtime import tracing
from spotreel.adapters.kafka import read_partition
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.grant_reasons import GrantReasons, explain
from spotreel.domain.retention import Retention, summarize
from spotreel.domain.state import JobState
from spotreel.platform.topics import changelog_topic, events_topic
from spotreel.config.settings import Settings

from spotreel.services.scheduler import statecodec
from spotreel.services.scheduler.redelivery import header_offset

_SKIP = {"job_id", "version", "at_ms", "causation_id"}


def human_time(ms: int) -> str:
    """Epoch milliseconds as UTC ISO 8601 to the millisecond: 2026-11-24T22:38:01.123Z."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def human_duration(ms: int) -> str:
    """Milliseconds as a person reads them: 850ms, 12.5s, 3m05s, 2h01m."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = ms // 1000
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def _describe(e: object) -> str:
    parts = []
    for f in dataclasses.fields(e):  # type: ignore[arg-type]
        v = getattr(e, f.name)
        if f.name in _SKIP or v in (None, (), ""):
            continue
        if f.name == "prompt" and isinstance(v, str) and len(v) > 40:
            v = v[:37] + "..."
        elif isinstance(v, int) and not isinstance(v, bool) and f.name.endswith("_ms"):
            # Instants (…_at_ms, …occurrence_ms, through_ms) as times, the rest (ttl, backoff…) as durations.
            instant = f.name.endswith(("at_ms", "occurrence_ms")) or f.name == "through_ms"
            v = human_time(v) if instant else human_duration(v)
        parts.append(f"{f.name}={v}")
    return " ".join(parts)


def timeline(settings: Settings, job_id: str, codec: Codec | None = None) -> list[str]:
    codec = codec or Codec.default()
    p = partition_for(job_id, settings.partitions)
    lines = []
    state: JobState | None = None
    first_ms: int | None = None
    traces: list[str] = []  # the trace ids its events carry (spotreel/runtime/tracing.py), in order of appearance
    for msg in read_partition(settings.kafka_bootstrap, events_topic(settings), p):
        if msg.key() != job_id.encode():
            continue
        e = codec.decode_message(msg.value())
        trace_id = tracing.trace_id_of(tracing.traceparent_of(msg.headers()))
        if trace_id is not None and trace_id not in traces:
            traces.append(trace_id)
        state = evolve(state, e)
        tag = "REJECTED " if isinstance(e, ev.CommandRejected) else ""
        first_ms = e.at_ms if first_ms is None else first_ms
        since = f"+{human_duration(max(0, e.at_ms - first_ms))}"
        lines.append(f"v{e.version:<3} {human_time(e.at_ms)} {since:>8} {tag}{type(e).__name__:<18} cause={e.causation_id} "
                     f"[{msg.topic()}:{p}@{msg.offset()} cmd@{header_offset(msg.headers())}] {_describe(e)}"
                     + (f" trace={trace_id}" if trace_id else ""))
    if state is not None:
        lines.append(f"-- now {state.status}, version {state.version}, epoch {state.epoch}, attempt {state.attempt},"
                     f" preemptions {state.preemptions}, attempts_used {state.attempts_used}, "
                     f"checkpoints {[c.key for c in state.checkpoints]}")
        lines.append(f"-- trace ids: {', '.join(traces)}" if traces else "-- trace ids: none (no event was traced)")
    return lines


def why(settings: Settings, job_id: str, codec: Codec | None = None) -> list[str]:
    """`spotreel replay --why JOB_ID`: for each grant of the job, why dispatch chose it then (the JobLeased
    `why_*` fields, domain/grant_reasons.py), with the tier it had at that moment."""
    codec = codec or Codec.default()
    p = partition_for(job_id, settings.partitions)
    lines = []
    state: JobState | None = None
    for msg in read_partition(settings.kafka_bootstrap, events_topic(settings), p):
        if msg.key() != job_id.encode():
            continue
        e = codec.decode_message(msg.value())
        if isinstance(e, ev.JobLeased) and state is not None:
            head = f"epoch {e.epoch} {human_time(e.at_ms)} to {e.worker_id} (lease {e.attempt}, cause={e.causation_id}):"
            lines.append(f"{head} {grant_why(state.priority, e)}")
        state = evolve(state, e)
    return lines


def grant_why(priority: int, e: ev.JobLeased) -> str:
    if e.why_priority is None:
        return "no reasons recorded (a grant from before they were, or not made by dispatch)"
    return explain(priority, GrantReasons(e.why_priority, e.why_overdue, e.why_waited_ms or 0, e.why_share or 0.0,
                                          e.why_next_share, e.why_weight or 1.0, e.why_warm, e.why_candidates))


def fold_events(settings: Settings, codec: Codec) -> dict[str, JobState]:
    states: dict[str, JobState] = {}
    for p in range(settings.partitions):
        for msg in read_partition(settings.kafka_bootstrap, events_topic(settings), p):
            e = codec.decode_message(msg.value())
            s = evolve(states.get(e.job_id), e)
            if s is not None:
                states[e.job_id] = s
    return states


def read_table(settings: Settings) -> dict[str, JobState]:
    """The table as its changelog holds it now: the latest record per key, a tombstone removing the key. An
    evicted job (domain/retention.py) is its summary (`evicted=True`)."""
    table: dict[str, JobState] = {}
    summaries: dict[str, JobState] = {}
    prefix = statecodec.SUMMARY_PREFIX.decode()
    for p in range(settings.partitions):
        for msg in read_partition(settings.kafka_bootstrap, changelog_topic(settings, "jobs"), p):
            key = msg.key().decode()
            if key.startswith(prefix):
                job_id = key[len(prefix):]
                summaries.pop(job_id, None)
                if msg.value() is not None:
                    summaries[job_id] = statecodec.loads_summary(job_id, msg.value())
                continue
            if key.startswith("~"):
                continue
            table.pop(key, None)
            state = statecodec.loads(msg.value()) if msg.value() is not None else None
            if state is not None:
                table[key] = state
    return {**summaries, **table}


@dataclass
class RebuildReport:
    jobs: int
    differences: list[str] = field(default_factory=list)
    evicted: int = 0  # terminal jobs the table keeps only as a summary, or no longer at all

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        head = f"rebuilt {self.jobs} jobs from the events topic ({self.evicted} evicted): " + (
            "the table agrees" if self.ok else f"{len(self.differences)} differ from the table")
        return "\n".join([head, *self.differences[:50]])


def rebuild(settings: Settings, codec: Codec | None = None) -> RebuildReport:
    """Fold the events topic and compare with the table. Both are read now: run it on a quiet system
    (or accept that jobs changed in between differ by version)."""
    codec = codec or Codec.default()
    folded = fold_events(settings, codec)
    table = read_table(settings)
    report = RebuildReport(len(folded))
    policy = Retention(settings.scheduler_retention_s * 1000, settings.scheduler_summary_retention_s * 1000)
    now = int(time.time() * 1000)
    for job_id in sorted(set(folded) | set(table)):
        a, b = folded.get(job_id), table.get(job_id)
        if a is not None and b is not None and b.evicted and a.is_terminal:
            report.evicted += 1
            a = summarize(a)  # the table keeps only the summary of an evicted job
        elif a is not None and b is None and a.is_terminal and a.updated_at_ms + policy.summary_retention_ms <= now:
            report.evicted += 1  # evicted, and its summary forgotten too (domain/retention.py)
            continue
        if a != b:
            why = ("missing from the table" if b is None else "not in the events topic" if a is None
                   else f"events v{a.version} {a.status} vs table v{b.version} {b.status}")
            report.differences.append(f"{job_id}: {why}")
    return report
