"""Where workers come from. One interface; `local` runs real `spotreel worker` processes on this machine,
`simulated` (provider_sim.py) runs the fleet simulator's workers inside the capacity process.

A provider knows its workers by id and can add and drain them; which of them are idle or busy is the
control plane's knowledge (the workers read model), joined in by the manager. Preemption notices (a cloud
provider's "this instance goes away in N seconds") arrive through `notices()`; the manager drains such a
worker at once so its job is checkpointed and released instead of lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from spotreel.platform.ports import free_port
from spotreel.platform.processes import proc_stat, read_pidfile, spawn, stop_group


@dataclass(frozen=True)
class Worker:
    worker_id: str
    draining: bool = False
    started_at: float = 0.0  # wall clock (time.time()) when the provider started it


class Provider(Protocol):
    def workers(self) -> list[Worker]: ...
    def add(self, n: int) -> list[str]: ...
    def drain(self, worker_id: str) -> None: ...
    def notices(self) -> list[str]: ...
    def summary(self) -> dict: ...
    def close(self, timeout: float = 30.0) -> None: ...


def default_worker_argv(pool: str, worker_id: str, threads: int = 1) -> list[str]:
    """`spotreel worker` for one pool under the id the provider tracks it by. The gateway, worker key and
    model come from the SPOTREEL_WORKER_* settings the capacity process passes on in its environment."""
    return [sys.executable, "-m", "spotreel.cli", "worker", "--pool", pool, "--worker-id", worker_id,
            "--threads", str(threads)]


class LocalProvider:
    """Worker processes started here, tracked by pid files under `run_dir`, drained with SIGTERM (the
    worker checkpoints, releases its lease and exits). A preemption notice is a file named after the worker
    in `run_dir/notices/` (what a spot-instance metadata watcher would write)."""

    def __init__(self, pool: str, run_dir: Path, log_dir: Path, argv: Sequence[str] | None = None,
                 env: dict[str, str] | None = None, name_prefix: str = "local", threads: int = 1,
                 worker_metrics: bool = False) -> None:
        if threads < 1:
            raise ValueError("a worker needs at least one thread")
        self.pool = pool
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.argv_template = list(argv) if argv else None
        self.env = {**os.environ, **(env or {})}
        self.prefix = name_prefix
        self.threads = threads
        # Each worker serves Prometheus metrics on a port of its own (and announces it, worker/metrics.py).
        self.worker_metrics = worker_metrics
        self._draining: set[str] = set()
        # Our own children, so the ones that exited are reaped (no zombies in a long-lived manager) and
        # their exit status is known; workers found through pid files only (a restarted manager) are not.
        self._children: dict[str, subprocess.Popen] = {}
        self.exits: dict[str, int] = {}
        self.made = 0
        (run_dir / "notices").mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)

    def _pidfile(self, worker_id: str) -> Path:
        return self.run_dir / f"{worker_id}.pid"

    def _argv(self, worker_id: str) -> list[str]:
        # A port free now; one taken before the worker binds it ends that worker (exit 2) and it is replaced.
        port = free_port() if self.worker_metrics else 0
        if self.argv_template is None:
            argv = default_worker_argv(self.pool, worker_id, self.threads)
            return [*argv, "--metrics-port", str(port)] if port else argv
        return [a.format(pool=self.pool, worker_id=worker_id, threads=self.threads, metrics_port=port)
                for a in self.argv_template]

    def _reap(self) -> None:
        for wid, proc in list(self._children.items()):
            code = proc.poll()
            if code is not None:
                self.exits[wid] = code
                del self._children[wid]

    def workers(self) -> list[Worker]:
        self._reap()
        out = []
        for pidfile in sorted(self.run_dir.glob("*.pid")):
            wid = pidfile.stem
            if read_pidfile(pidfile) is None:
                pidfile.unlink(missing_ok=True)
                self._draining.discard(wid)
                continue
            out.append(Worker(wid, wid in self._draining, pidfile.stat().st_mtime))
        return out

    def add(self, n: int) -> list[str]:
        started = []
        for _ in range(n):
            wid = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
            self._children[wid] = spawn(self._argv(wid), pidfile=self._pidfile(wid),
                                        log=self.log_dir / f"{wid}.log", cwd=self.run_dir, env=self.env)
            started.append(wid)
            self.made += 1
        return started

    def drain(self, worker_id: str) -> None:
        running = read_pidfile(self._pidfile(worker_id))
        if running is None:
            return
        self._draining.add(worker_id)
        st = proc_stat(running.pid)
        if st is not None:
            try:
                os.killpg(st.pgrp, signal.SIGTERM)
            except ProcessLookupError:
                pass  # exited since we looked: nothing left to drain

    def notices(self) -> list[str]:
        out = []
        for f in sorted((self.run_dir / "notices").iterdir()):
            out.append(f.name)
            f.unlink(missing_ok=True)
        return out

    def summary(self) -> dict:
        self._reap()
        return {"workers_made": self.made, "workers_live": len(self.workers()),
                "exit_codes": dict(Counter(str(c) for c in self.exits.values()))}

    def close(self, timeout: float = 30.0) -> None:
        """Stop every worker this provider runs: drain those not draining yet, wait for all of them together
        up to `timeout`, then kill what is left. A draining worker gets no second SIGTERM: one landing while
        its interpreter shuts down would end it by the signal instead of its clean exit."""
        for w in self.workers():
            if not w.draining:
                self.drain(w.worker_id)
        deadline = time.monotonic() + timeout
        # Our children until reaped too: a worker's main thread can be a zombie while its other threads
        # still wind down, and only then is its exit status there to read.
        while (self.workers() or self._children) and time.monotonic() < deadline:
            time.sleep(0.1)
        for w in self.workers():
            running = read_pidfile(self._pidfile(w.worker_id))
            if running is not None:
                stop_group(running.pid, 0, w.worker_id)
            self._pidfile(w.worker_id).unlink(missing_ok=True)
        self._reap()
