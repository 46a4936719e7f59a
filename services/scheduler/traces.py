"""The scheduler's hop of a trace (spotreel/runtime/tracing.py): a span for a command that carries a `traceparent`,
and for any later command of a job whose trace is remembered here, so its events and the worker's lease
answer (WorkAssigned) carry the trace on.

Why a map in memory: a RequestWork comes from the worker, not from the job's submitter, so the trace of the
job it is granted can only come from the scheduler. Only traced jobs are in it (a few with sampling), it is
bounded (`limit`, oldest dropped first) and a job leaves it when it ends. It is not in the job table: after
a restart or a change of partition owner a job's later events carry no trace until a command with a
`traceparent` comes again (a gap the trace shows; see monitoring/README.md).

Cost: on_batch calls `on_command` only when the record has headers or this map is not empty; without
tracing nothing else runs per command. A traced job's renewals that the scheduler absorbs (no event) get no
span. bench/trace_overhead.py measures both.
"""

from __future__ import annotations

from typing import Any

from spotreel.runtime import tracing


class JobTraces:
    def __init__(self, limit: int = 10_000) -> None:
        self.by_job: dict[str, str] = {}
        self.limit = limit

    def on_command(self, headers: Any, out: Any, partition: int, offset: int, started_ns: int | None) -> str | None:
        """End a span for this handled command if it continues a trace; the traceparent its events and
        answer carry, or None."""
        if not out.events and out.answer is None:
            return None  # an absorbed renewal or a dead letter: no event to hand the trace on to
        given = tracing.traceparent_of(headers) if headers else None
        jobs = list(out.states) or ([out.answer.job_id] if getattr(out.answer, "job_id", None) else [])
        parent = given
        if parent is None:
            parent = next((self.by_job[j] for j in jobs if j in self.by_job), None)
            if parent is None:
                return None
        command = type(out.command).__name__ if out.command is not None else "command"
        attributes = {"messaging.kafka.partition": partition, "messaging.kafka.offset": offset,
                      "spotreel.events": [type(e).__name__ for e in out.events]}
        if jobs:
            attributes["spotreel.job_id"] = jobs[0]
        span = tracing.start_span(f"scheduler {command}", parent, attributes=attributes, start_time=started_ns)
        span.end()
        handed_on = tracing.traceparent_for(span)
        if handed_on is None:
            return None
        for job, (_, after) in out.states.items():
            if after.is_terminal:
                self.by_job.pop(job, None)
            else:
                self.remember(job, handed_on)
        if not out.states and jobs:
            self.remember(jobs[0], handed_on)
        return handed_on

    def remember(self, job_id: str, traceparent: str) -> None:
        self.by_job.pop(job_id, None)
        self.by_job[job_id] = traceparent
        while len(self.by_job) > self.limit:
            self.by_job.pop(next(iter(self.by_job)))

