"""The local stack as a whole: which components, `up` (in parallel) and `down`."""

from __future__ import annotations

import fcntl
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

from spotreel.devstack import maven
from spotreel.platform import ports as portlib
from spotreel.devstack.cassandra import Cassandra
from spotreel.devstack.cluster import cassandra_nodes, kafka_nodes, record_nodes
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.devstack.kafka import Kafka
from spotreel.devstack.layout import Layout
from spotreel.devstack.seaweed import Seaweed
from spotreel.devstack.server import Say, Server
from spotreel.devstack.services import services
from spotreel.config.settings import Settings

LOCK_WAIT_S = 600


def components(settings: Settings) -> list[Server]:
    """Everything `up` starts and `status` reports, in start order: the servers, then the services."""
    # One Kafka and one Cassandra, or the cluster profile's nodes of each (cluster.py).
    return [*kafka_nodes(settings), *cassandra_nodes(settings), Seaweed(settings), *services(settings)]


def tiers(comps: list[Server]) -> list[list[Server]]:
    """Start order: every server (in parallel) before any service (in parallel); stop order is reversed."""
    return [t for t in ([c for c in comps if not c.service], [c for c in comps if c.service]) if t]


def locked_say(say: Say) -> Say:
    lock = threading.Lock()

    def _say(line: str) -> None:
        with lock:
            say(line)

    return _say


@contextmanager
def infra_lock(layout: Layout, say: Say) -> Iterator[None]:
    """One `up`/`down` at a time per home: two racing `up`s would start two brokers on one data dir."""
    layout.run_root.mkdir(parents=True, exist_ok=True)
    with open(layout.lockfile, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another `spotreel infra` command on {layout.home} to finish")
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise InfraError(f"another `spotreel infra` command still holds {layout.lockfile}") from None
                    time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def combine(errors: list[InfraError]) -> InfraError:
    first, rest = errors[0], errors[1:]
    hints = list(first.hints)
    for e in rest:
        hints += [e.message, *(f"  {h}" for h in e.hints)]
    return InfraError(first.message, hints)


def up(settings: Settings, *, fresh: bool = False, say: Say = print) -> list[str]:
    """Bring every component to answering; returns the names this call started."""
    say = locked_say(say)
    t0 = time.monotonic()
    layout = Layout.of(settings)
    layout.ensure_writable()
    with infra_lock(layout, say):
        comps = components(settings)
        if fresh:
            stop_errors = _stop_all(comps, say)
            if stop_errors:
                raise combine(stop_errors)
            shutil.rmtree(layout.data_root, ignore_errors=True)
            layout.data_root.mkdir(parents=True, exist_ok=True)
            say(f"fresh: wiped {layout.data_root}")
        record_nodes(settings)  # the home's shape, for `down`, `status` and the next `up` (cluster.py)
        to_start = [c for c in comps if c.running() is None]
        conflicts = [found for c in to_start for found in c.port_conflicts()]
        if conflicts:
            (message, holder), rest = conflicts[0], conflicts[1:]
            raise InfraError(message, [holder, *(m for m, _ in rest),
                             "stop that process, or move spotreel to other ports (SPOTREEL_*_PORT settings)"])
        for comp in to_start:
            comp.preflight()
        if any(isinstance(c, (Kafka, Cassandra)) for c in to_start):
            maven.fetch(settings, say, report_cached=False)
        errors: list[InfraError] = []
        started: list[str] = []
        for tier in tiers(comps):
            # Services need the servers (topics, schema, dev key): a tier starts only when the last is up.
            started += _ensure_tier(tier, say, errors)
            if errors:
                break
        if errors:
            raise combine(errors)
    what = f"started {', '.join(started)}" if started else "nothing to start"
    say(f"stack up in {time.monotonic() - t0:.1f} s ({what}); `spotreel infra status` shows it")
    return started


def _ensure_tier(tier: list[Server], say: Say, errors: list[InfraError]) -> list[str]:
    started: list[str] = []
    with ThreadPoolExecutor(max_workers=len(tier), thread_name_prefix="infra-up") as pool:
        futures = [(c, pool.submit(c.ensure_up, say)) for c in tier]
        for comp, fut in futures:
            try:
                if fut.result():
                    started.append(comp.name)
            except InfraError as exc:
                errors.append(exc)
            except Exception as exc:  # a bug or an unexpected client error: still one clear line
                errors.append(InfraError(f"{comp.name}: {type(exc).__name__}: {str(exc)[:300]}",
                                         [f"log: {comp.main_log()}"]))
    return started


def _stop_all(comps: list[Server], say: Say) -> list[InfraError]:
    """Services first (a scheduler stopping gracefully still talks to Kafka), then the servers."""
    errors: list[InfraError] = []
    for tier in reversed(tiers(comps)):
        with ThreadPoolExecutor(max_workers=len(tier), thread_name_prefix="infra-down") as pool:
            for fut in [pool.submit(c.stop, say) for c in reversed(tier)]:
                try:
                    fut.result()
                except InfraError as exc:
                    errors.append(exc)
    return errors


def down(settings: Settings, *, say: Say = print) -> None:
    """Stop exactly what our pid files name, then prove none of our ports has a listener left."""
    say = locked_say(say)
    t0 = time.monotonic()
    layout = Layout.of(settings)
    comps = components(settings)
    if layout.run_root.is_dir():
        try:
            with infra_lock(layout, say):
                was_running = [c.name for c in comps if c.running() is not None]
                errors = _stop_all(comps, say)
        except OSError as exc:
            raise InfraError(f"cannot stop the stack in {layout.home}: {exc.strerror}") from None
        if errors:
            raise combine(errors)
    else:
        was_running = []
    leftovers = []
    for comp in comps:
        for port in comp.ports():
            if portlib.listening(comp.bind_host(), port, timeout=0.3):
                who = portlib.holder(port)
                leftovers.append(f"{comp.name}: port {port} on {comp.bind_host()} is still in use by a process "
                                 "that spotreel infra did not start" + (f" (pid {who[0]}: {who[1]})" if who else ""))
    if leftovers:
        raise InfraError(leftovers[0], leftovers[1:])
    if was_running:
        say(f"stack down in {time.monotonic() - t0:.1f} s (stopped {', '.join(was_running)})")
    else:
        say("stack down: nothing was running")


def provision(settings: Settings, *, timeout: float = 120.0, say: Say = print) -> None:
    """Topics, buckets and schema on servers someone else runs (Docker Compose, a shared cluster).

    Waits until each answers, then runs the same idempotent setup `up` runs after starting its own.
    """
    say = locked_say(say)
    for comp in components(settings):
        if comp.service:
            continue  # provision prepares servers for services; it does not run them
        deadline = time.monotonic() + timeout
        while True:
            try:
                detail = comp.probe(min(5.0, timeout))
                break
            except ProbeFailed as exc:
                if time.monotonic() > deadline:
                    raise InfraError(f"{comp.name}: not answering at {comp.address()}: {exc}") from None
                time.sleep(1.0)
        say(f"{comp.name}: answering at {comp.address()} ({detail})")
        comp.setup(say)
