"""The Celery side of the peer comparison: one task that runs a job of K steps of a fixed sleep.

Configured the way Celery's documentation recommends for work that must survive a worker's death:
acks_late (ack after the task ran), reject_on_worker_lost (requeue when the child process dies), prefetch 1,
and a Redis visibility timeout after which an unacknowledged task is handed out again. The task writes
what happened straight into Redis (start, each step, completion), so the bench can count lost, duplicated
and wasted work even for runs cut short by kill -9.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from celery import Celery

BROKER = os.environ.get("PEER_BROKER_URL", "redis://127.0.0.1:6379/0")
VISIBILITY_S = float(os.environ.get("PEER_VISIBILITY_S", "30"))

app = Celery("peer", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_transport_options={"visibility_timeout": VISIBILITY_S},
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)

@functools.lru_cache(maxsize=1)
def store() -> redis.Redis:
    """One connection per worker process, made lazily (after the prefork child exists)."""
    return redis.Redis.from_url(BROKER)


@app.task(name="peer.run_job")
def run_job(job_id: str, steps: int, step_s: float) -> None:
    r = store()
    r.rpush("peer:starts", f"{job_id}|{time.time()}|{os.getpid()}")
    for _ in range(steps):
        time.sleep(step_s)
        r.incr("peer:steps")
    r.rpush("peer:done", f"{job_id}|{time.time()}|{os.getpid()}")
