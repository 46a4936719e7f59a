"""One renewal inside a RenewalBatch (domain/commands.py); the batch's lease requests are whole RequestWork
records.

A gateway in front of thousands of HTTP workers would otherwise put every heartbeat and progress report in its
own Kafka record, and the broker, the owner's consumer and its answer producer pay per record. It keeps them
for a short window per commands partition and sends them as one record; the owner takes each one apart and
judges it exactly as if it had come alone (fencing, its own send time), and answers those it absorbs in one
record (events.RenewalReplies). An entry is a RenewLease when `step` is None, else a ReportProgress.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchedRenewal:
    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    sent_ms: int  # when the worker sent it (the gateway's intake time, dispatch/intake.py)
    step: int | None = None
    progress_pct: float | None = None
    phase: str | None = None
