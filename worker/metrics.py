"""The worker's Prometheus metrics: what only the worker sees (step time, checkpoint cost, renewals it sent,
the phases of a render, how its leases ended). One registry per worker (no module globals), served on
127.0.0.1 only when `spotreel worker --metrics-port` is given.

A served worker also announces itself to a local Prometheus (`spotreel infra monitoring up`) by writing a
file_sd file `worker-<id>.json` into its targets directory when that directory exists, and removes it on
exit; a worker killed with SIGKILL (or ended by a wedged step, exit 75) leaves its file behind and shows as
up=0 until someone deletes it.
Preemptions are not counted here: a worker that vanishes cannot count its own loss; the scheduler counts
them (spotreel_scheduler_preemptions_total).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

# Counters' and histograms' `_created` timestamps would come out as separate gauge families.
disable_created_metrics()

log = logging.getLogger("spotreel.worker.metrics")

PHASES = ("load", "denoise", "decode", "encode", "upload")


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.step = Histogram("spotreel_worker_step_seconds", "one denoising step", ["pool"], registry=r,
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.checkpoint_seconds = Histogram(
            "spotreel_worker_checkpoint_seconds", "a checkpoint written: snapshot, serialise, upload to S3",
            ["pool"], registry=r, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.checkpoint_bytes = Histogram(
            "spotreel_worker_checkpoint_bytes", "size of a written checkpoint object", ["pool"], registry=r,
            buckets=(1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10))
        self.checkpoint_failures = Counter(
            "spotreel_worker_checkpoint_failures", "checkpoints the store did not take within the checkpoint "
            "budget (or refused), each one skipped: nothing recorded, the render went on", ["pool"], registry=r)
        self.storage_retries = Counter(
            "spotreel_worker_storage_retries", "S3 calls of a render tried again after a transient error, beyond "
            "botocore's own tries (op: checkpoint | resume | upload; worker/storage.py)", ["pool", "op"], registry=r)
        self.renewals = Counter(
            "spotreel_worker_lease_renewals", "renewals the pulse sent (kind: heartbeat | progress) by outcome: "
            "accepted, pending (durable, not judged in time), refused, lost (the lease is gone), unreachable",
            ["pool", "kind", "outcome"], registry=r)
        self.phase = Histogram(
            "spotreel_worker_phase_seconds", "time a lease spent in each phase: load (start or resume from a "
            "checkpoint), denoise (the steps and the checkpoints between them), decode, encode, upload", ["pool", "phase"], registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
        self.jobs = Counter("spotreel_worker_jobs", "leases run to an end, by outcome (job.py's RunResult.kind)",
                            ["pool", "outcome"], registry=r)
        self.busy = Gauge("spotreel_worker_busy", "1 while the worker holds a lease", registry=r)
        self.model_switch_seconds = Histogram(
            "spotreel_worker_model_switch_seconds", "a model switch: the loaded weights dropped, another "
            "--model loaded for a lease of it", registry=r, buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))

    def renewal(self, pool: str, kind: str, outcome: str) -> None:
        self.renewals.labels(pool, kind, outcome).inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> tuple[Any, Any]:
        """(server, thread), for a caller that stops serving before its process ends (tests)."""
        return start_http_server(port, addr=host, registry=self.registry)


def announce(targets_dir: Path, worker_id: str, host: str, port: int) -> Path | None:
    """Write this worker's file_sd file if a local Prometheus keeps its targets in `targets_dir`; None if not."""
    if not targets_dir.is_dir():
        return None
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in worker_id)
    path = targets_dir / f"worker-{safe}.json"
    tmp = path.with_suffix(".tmp")
    # No `pool` target label: it would clash with the metrics' own pool label.
    labels = {"service": "worker", "worker_id": worker_id}
    tmp.write_text(json.dumps([{"targets": [f"{host}:{port}"], "labels": labels}]) + "\n")
    tmp.replace(path)  # Prometheus must never read a half-written file
    return path


def withdraw(path: Path | None) -> None:
    if path is None:
        return
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        log.warning("could not remove %s", path, exc_info=True)
