"""Shared by the capacity manager's tests against real services: a private control plane (the fleet
simulator's PrivateStack: real scheduler, projector, gateway and webhooks on their own topics, keyspace and
ports) and reading lease intervals back from the events."""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from spotreel.domain import events as ev
from spotreel.services.simulator.stack import PrivateStack
from spotreel.config.settings import Settings


def private_plane(base: Settings, buckets: bool = False, partitions: int = 3) -> Iterator[PrivateStack]:
    """Generator for a fixture. With `buckets`, own artifact and checkpoint buckets (real workers write)."""
    run_id = uuid.uuid4().hex[:10]
    if buckets:
        base = replace(base, s3_bucket_artifacts=f"cap-{run_id}-art", s3_bucket_checkpoints=f"cap-{run_id}-ckpt")
    plane = PrivateStack(base, run_id, partitions, say=lambda *_: None)
    plane.servers = [srv for srv in plane.servers if srv.name != "webhooks"]  # no callbacks here; save a core
    s3 = None
    try:
        if buckets:
            from spotreel.platform.s3 import s3_client

            s3 = s3_client(plane.settings, timeout=30.0)
            for b in (plane.settings.s3_bucket_artifacts, plane.settings.s3_bucket_checkpoints):
                s3.create_bucket(Bucket=b)
        plane.start(["acme"], quota=1000)
        yield plane
    finally:
        plane.stop()
        if s3 is not None:
            for b in (plane.settings.s3_bucket_artifacts, plane.settings.s3_bucket_checkpoints):
                for obj in s3.list_objects_v2(Bucket=b).get("Contents", []):
                    s3.delete_object(Bucket=b, Key=obj["Key"])
                s3.delete_bucket(Bucket=b)
        shutil.rmtree(plane.settings.home, ignore_errors=True)


def wait_until(pred: Callable[[], Any], timeout: float = 60.0, step: float = 0.2, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@dataclass(frozen=True)
class Held:
    """One lease as the events tell it: who held it, from when until when (ms; None while open)."""

    job_id: str
    epoch: int
    worker_id: str
    from_ms: int
    to_ms: int | None
    ended_by: str | None


def leases(events: list[Any]) -> list[Held]:
    opened: dict[tuple[str, int], ev.JobLeased] = {}
    ended: dict[tuple[str, int], tuple[int, str]] = {}
    for e in events:
        if isinstance(e, ev.JobLeased):
            opened[(e.job_id, e.epoch)] = e
        elif isinstance(e, (ev.JobSucceeded, ev.LeaseReleased, ev.LeaseExpired, ev.AttemptFailed)):
            ended.setdefault((e.job_id, e.epoch), (e.at_ms, type(e).__name__))
    out = []
    for key, le in opened.items():
        to, how = ended.get(key, (None, None))
        out.append(Held(le.job_id, le.epoch, le.worker_id, le.at_ms, to, how))
    return out


def held_at(holds: list[Held], worker_id: str, at_ms: int) -> list[Held]:
    """The leases `worker_id` held at `at_ms`."""
    return [h for h in holds if h.worker_id == worker_id and h.from_ms <= at_ms and (h.to_ms is None or at_ms < h.to_ms)]
