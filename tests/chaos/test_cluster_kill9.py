"""The cluster profile under kill -9: a private 3-broker Kafka and 3-node Cassandra with two gateways behind
HAProxy and two schedulers in one group (`infra up --nodes 3 --replicas gateway=2,scheduler=2`), with jobs
flowing through the real gateways, schedulers and projector to simulated workers and to two real `spotreel
worker` processes rendering the tiny model. In one instant a Kafka broker and a Cassandra node (node 1 of
each: the first bootstrap server and the first contact point), a gateway (the one the most simulated workers
poll through) and a scheduler (the one owning the most partitions) are killed; no operator acts while they
are down. Then `infra up` restarts exactly those four and the cluster heals. Each kind of node dies once:
one kill proves that the cluster rides out the loss of that node (a Cassandra node costs over a minute to
restart here, so each further round costs more than it proves).

Checked while they are down: a job acknowledged after the kill is dispatched, the dead scheduler's partitions
grant again, the workers the dead gateway served are leased again, a real worker finishes a job leased after
the kill, and more jobs end. After the restart: no partition is under-replicated, every Cassandra node is up
and NORMAL with no hint left undelivered, HAProxy has both gateways UP, both schedulers own partitions, and
every partition grants a lease again. Every job the API acknowledged (202) ends exactly once on the events
topic (audit.py: versions without gap or repeat, fencing, one terminal event), the read model, read back at
LOCAL_QUORUM, says it succeeded, and every real job's video has the frames of an undisturbed render of its
request.

Printed: seconds from the kill to the first lease of a job acknowledged after it ("dispatch again"), to the
first lease on the dead scheduler's partitions, to a worker the dead gateway served and to a real worker; and
from `infra up` to healed.

The figures these print: bench/README.md, "Faults"; what the test holds: tests/chaos/README.md, "The cluster
test".
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.platform import ports as portlib
from spotreel.domain import events as ev
from spotreel.platform.s3 import s3_client
from spotreel.platform.seed import DEV_WORKER_KEY
from spotreel.config.settings import Settings
from spotreel.worker.artifacts import FRAMES_META
from tests.chaos.audit import TERMINAL, audit
from tests.chaos.clusterkit import (Grant, SimWorker, Submitter, cassandra_normal, get, infra_up, kill9_at_once,
                                    under_replicated)
from tests.chaos.wholekit import EventLog, Fleet, Order, PlaneView, read_events, request_of, wait_until
from tests.chaos.wholekit import Submitter as OrderSubmitter
from tests.harness.private_stack import PrivateStack, private_settings
from tests.integration.workerkit import GPU as REAL_GPU
from tests.integration.workerkit import reference_checksum, tiny_model

pytestmark = [pytest.mark.chaos, pytest.mark.serial, pytest.mark.timeout(1200)]

REPLICAS = "gateway=2,scheduler=2"
WORKERS = 3
STEPS = 2
STEP_S = 0.3
RATE = 2.0  # submissions per second
# Killed with a gateway and a scheduler: the first bootstrap server and the first contact point.
NODES_KILLED = ("kafka-1", "cassandra-1")
# Real workers: the tiny model, small renders, a short lease (a lease parked on a dead gateway costs its TTL).
REAL_WORKERS = 2
REAL_IN_FLIGHT = 2  # unfinished real jobs kept ahead of them (their renders cost this box's CPU)
REAL_JOBS = 200  # orders prepared; the feeder stops long before
REQUESTS = [{"prompt": "a red fox running in snow", "seed": 1234}, {"prompt": "a small boat on a calm lake", "seed": 77}]
SHAPE = {"num_steps": 12, "resolution": "32x32", "duration": 0.5, "fps": 8}
REAL_ARGS = ("--lease-ttl-ms", "8000", "--checkpoint-every", "1.0", "--grace", "15")


def emit(config: pytest.Config, text: str) -> None:
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(text, flush=True)


def cluster_settings(home):
    """A private stack's settings whose extra brokers' ports (and the Cassandra ports on 127.0.0.2-3) are free."""
    for _ in range(50):
        s = private_settings(home, cluster_nodes=3, kafka_heap="256m", cassandra_heap="512m", partitions=3,
                             stop_timeout=30)
        extra = [(s.host, p) for n in (2, 3) for p in s.kafka_node_ports(n)]
        extra += [(s.cassandra_node_host(n), p) for n in (2, 3) for p in (s.cassandra_port, s.cassandra_storage_port)]
        if all(portlib.bindable(h, p) for h, p in extra):
            return s
    raise RuntimeError("no free ports for a 3-node private stack")


@pytest.fixture
def cluster(tmp_path_factory, request):
    say = lambda line: emit(request.config, f"  [cluster] {line}")  # noqa: E731
    stack = PrivateStack(cluster_settings(tmp_path_factory.mktemp("cluster") / "home"), say)
    try:
        infra_up(stack, "--nodes", "3", "--replicas", REPLICAS)
        yield stack
    finally:
        try:
            # `down` proves no port of the stack answers a connect; once, a port of the stopped SeaweedFS still
            # answered one (no holder found; other engineers' stacks draw ports from the same range). Then
            # `down` again, until it finds everything stopped and every port quiet.
            wait_until(lambda: down_quietly(stack, say), 60, "`infra down` to find every port of the stack quiet",
                       every=1.0)
        finally:
            left = stack.leftovers()
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                time.sleep(0.5)
                left = stack.leftovers()
            assert not left, "the cluster left processes or listeners behind:\n" + "\n".join(left)


def down_quietly(stack: PrivateStack, say) -> bool:
    """`infra down`; False when it stopped everything but a port of the stack still answered."""
    try:
        stack.down()
        return True
    except RuntimeError as exc:
        busy = [line for line in str(exc).splitlines()
                if "still in use by a process that spotreel infra did not start" in line]
        if not busy:
            raise
        say(f"infra down: {busy[0].strip()}")
        return False


def healed(stack: PrivateStack, components: tuple[str, ...]) -> bool:
    try:
        if any(c.startswith("kafka") for c in components) and under_replicated(stack.settings) != 0:
            return False
        # Up and NORMAL, and the hints the other nodes kept for it replayed (their hint files gone).
        return (not any(c.startswith("cassandra") for c in components)
                or (cassandra_normal(stack.settings) == (3, 3) and not hint_files(stack)))
    except Exception:  # noqa: BLE001 - not answering yet
        return False


def hint_files(stack: PrivateStack) -> list[str]:
    return [str(p) for n in (1, 2, 3) for p in stack.component(f"cassandra-{n}").data_dir.glob("hints/*.hints")]


def log_size(stack: PrivateStack, name: str) -> int:
    path = stack.component(name).main_log()
    return path.stat().st_size if path.exists() else 0


def owned(stack: PrivateStack, scheduler: str, since: int = 0) -> set[int] | None:
    """The partitions the scheduler's log says it owns since its last assignment logged after byte `since`
    (its lag gauge keeps the labels of partitions it lost); None when it logged none since."""
    path = stack.component(scheduler).main_log()
    if not path.exists():
        return None
    with path.open("rb") as f:
        f.seek(since)
        found = re.findall(r"scheduler owns partitions \[([\d, ]*)\]", f.read().decode(errors="replace"))
    return {int(p) for p in found[-1].split(",") if p.strip()} if found else None


class RealJobs:
    """Real renders beside the simulated ones: REAL_IN_FLIGHT unfinished jobs of REQUESTS kept ahead of two
    `spotreel worker` processes, and the undisturbed reference render of each request, computed in a thread."""

    def __init__(self, stack: PrivateStack, tmp, log: EventLog) -> None:
        self.log = log
        self.fleet = Fleet(PlaneView(stack, tmp, DEV_WORKER_KEY, tiny_model(Settings())), REAL_ARGS)
        for _ in range(REAL_WORKERS):
            self.fleet.start("http")
        rng = random.Random()
        bodies = [{**r, **SHAPE, "model": "tiny-t2v", "gpu_type": REAL_GPU} for r in REQUESTS]
        key = stack.settings.dev_api_key
        self.sub = OrderSubmitter(stack.settings.gateway_url, [Order("dev", key, f"real-{i}-{uuid.uuid4().hex[:8]}",
                                                                     rng.choice(bodies)) for i in range(REAL_JOBS)])
        self.references: dict[tuple, str] = {}
        self.feeding = threading.Event()
        self.feeding.set()
        self._threads = [threading.Thread(target=self._references, name="references", daemon=True),
                         threading.Thread(target=self._feed, name="real-feeder", daemon=True), self.sub]
        for t in self._threads:
            t.start()

    def _references(self) -> None:
        from types import SimpleNamespace

        try:
            for body in REQUESTS:
                full = {**body, **SHAPE}
                command = SimpleNamespace(prompt=full["prompt"], seed=full["seed"], num_steps=full["num_steps"],
                                          resolution=full["resolution"], duration_s=full["duration"], fps=full["fps"])
                self.references[request_of(full)] = reference_checksum(self.fleet.plane.model_dir, command, "ddim")
        except Exception as exc:  # noqa: BLE001 - reported where the references are needed
            self.failed = f"{type(exc).__name__}: {exc}"

    def _feed(self) -> None:
        while self.feeding.is_set():
            self.sub.allow(REAL_IN_FLIGHT - self.unfinished())
            time.sleep(0.5)

    def ended(self) -> set[str]:
        return self.log.ended(TERMINAL) & set(self.sub.jobs())

    def unfinished(self) -> int:
        return self.sub.allowed - len(self.ended()) - len(self.sub.refused)

    def leased_after(self, t_ms: int) -> list[ev.JobLeased]:
        return [e for j in self.sub.jobs() for e in self.log.job_events(j) if isinstance(e, ev.JobLeased)
                and e.at_ms >= t_ms]

    def stop_feeding(self) -> dict[str, Any]:
        """Stop new orders; returns every accepted one once the allowed ones are answered."""
        self.feeding.clear()
        self._threads[1].join(10)
        wait_until(self.sub.settled, 120, "every real order allowed to be answered", every=0.5)
        self.sub.stop.set()
        return self.sub.jobs()

    def reference(self, body: dict[str, Any]) -> str:
        self._threads[0].join(600)
        assert request_of(body) in self.references, getattr(self, "failed", "reference render unfinished")
        return self.references[request_of(body)]

    def close(self) -> None:
        self.feeding.clear()
        self.sub.stop.set()
        self.fleet.stop_all()


def first_lease_on(log: EventLog, partitions: set[int], n: int, t_ms: int) -> float | None:
    """Seconds from t_ms to the first JobLeased at or after it on one of `partitions` (of n)."""
    times = [e.at_ms for e in log.events() if isinstance(e, ev.JobLeased) and e.at_ms >= t_ms
             and partition_for(e.job_id, n) in partitions]
    return (min(times) - t_ms) / 1000 if times else None


def test_the_cluster_survives_kill9_of_brokers_cassandra_nodes_gateways_and_schedulers(cluster, tmp_path, request):
    s = cluster.settings
    say = lambda line: emit(request.config, f"  [cluster chaos] {line}")  # noqa: E731
    grants: list[Grant] = []
    stop = threading.Event()
    log = EventLog(s)
    workers = [SimWorker(s.gateway_url, grants, STEPS, STEP_S, stop) for _ in range(WORKERS)]
    submitter = Submitter(s.gateway_url, s.dev_api_key, RATE, STEPS)
    for t in (*workers, submitter):
        t.start()
    real = RealJobs(cluster, tmp_path, log)
    done = lambda: sum(w.completed for w in workers)  # noqa: E731
    try:
        wait_until(lambda: done() >= 5, 60, "the first jobs to end on the healthy cluster")
        # The real workers are rendering when the servers die (importing torch takes a while here).
        wait_until(lambda: len(real.ended()) >= 1, 240, "the first real render to end",
                   on_timeout=lambda: "\n".join(w.logs() for w in real.fleet.workers))
        four_at_once(cluster, workers, grants, submitter, real, log, say)

        submitter.stopping.set()
        submitter.join(120)
        accepted = dict(submitter.accepted)
        assert not submitter.is_alive() and len(accepted) >= 20, (len(accepted), submitter.refused)
        real_jobs = real.stop_feeding()
        assert not real.sub.refused, real.sub.refused
        everything = set(accepted) | set(real_jobs)

        wait_until(lambda: everything <= log.ended(TERMINAL), 180, "every acknowledged job to end", every=1.0,
                   on_timeout=lambda: f"unfinished: {sorted(everything - log.ended(TERMINAL))[:10]}")
        report = audit(read_events(s, Codec.default()), everything)
        assert not report.problems, report.problems[:10]
        assert report.outcomes() == {"JobSucceeded": len(everything)}, report.outcomes()

        # Every real video: the frames of an undisturbed render of its request.
        s3 = s3_client(s, timeout=30.0)
        for job, order in real_jobs.items():
            done_ev = report.jobs[job].succeeded
            head = s3.head_object(Bucket=s.s3_bucket_artifacts, Key=done_ev.artifact_key)
            assert head["Metadata"][FRAMES_META] == real.reference(order.order.body), (job, done_ev.artifact_key)

        # No acknowledged write lost: the read model (LOCAL_QUORUM) has every job, and it says succeeded.
        def projected() -> list[str]:
            return [j for j in everything
                    if (get(f"{s.gateway_url}/v1/videos/{j}", s.dev_api_key)[1] or {}).get("status") != "succeeded"]

        wait_until(lambda: not projected(), 60, "the read model to show every job succeeded", every=1.0)
        resumed = report.total("resumes")
        say(f"{len(accepted)} simulated and {len(real_jobs)} real jobs acknowledged, each ended once (succeeded); "
            f"real videos equal to the reference render: {len(real_jobs)} (resumed from a checkpoint: {resumed}); "
            f"{submitter.refused} refused; worker errors (5xx or no answer) {sum(w.errors for w in workers)}; "
            f"real worker outcomes {dict(Counter(o['outcome'] for o in real.fleet.outcomes()))}")
    finally:
        stop.set()
        submitter.stopping.set()
        real.close()
        for t in (*workers, submitter):
            t.join(45)
        log.close()


def four_at_once(cluster: PrivateStack, workers: list[SimWorker], grants: list[Grant], submitter: Submitter,
                 real: RealJobs, log: EventLog, say) -> None:
    """kill -9 of a broker, a Cassandra node, a gateway and a scheduler in the same instant; dispatch must come
    back everywhere without an operator; then `infra up` restarts exactly those four and the cluster heals."""
    s = cluster.settings
    schedulers = {n: owned(cluster, n) or set() for n in ("scheduler", "scheduler-2")}
    scheduler = max(schedulers, key=lambda n: (len(schedulers[n]), n))
    its_partitions = schedulers[scheduler]
    polls = Counter(w.gateway for w in workers)
    gateway = "gateway" if polls["gateway"] >= polls["gateway-2"] else "gateway-2"
    its_workers = {w.id for w in workers if w.gateway == gateway}
    victims = [*NODES_KILLED, gateway, scheduler]
    assert its_partitions and its_workers, (schedulers, polls)
    done = lambda: sum(w.completed for w in workers)  # noqa: E731
    before = done()

    killed_at = time.time()
    t_ms = int(killed_at * 1000)
    kill9_at_once(cluster, victims)
    what = f"the kill -9 of {', '.join(victims)}"
    anywhere = wait_until(lambda: next((g for g in list(grants) if g.at > killed_at
                                        and submitter.accepted.get(g.job_id, 0) > killed_at), None),
                          120, f"a job acknowledged after {what} to be dispatched")
    on_its = wait_until(lambda: first_lease_on(log, its_partitions, s.partitions, t_ms), 120,
                        f"a lease on {scheduler}'s partitions {sorted(its_partitions)} after {what}")
    its_worker = wait_until(lambda: next((g for g in list(grants) if g.at > killed_at and g.worker in its_workers),
                                         None), 120, f"a lease to a worker {gateway} served after {what}")

    def real_done_since() -> float | None:
        finished = real.ended()
        leased = [e for e in real.leased_after(t_ms) if e.job_id in finished]
        return (min(e.at_ms for e in leased) - t_ms) / 1000 if leased else None

    real_again = wait_until(real_done_since, 180, f"a real job leased after {what} to end",
                            on_timeout=lambda: "\n".join(w.logs() for w in real.fleet.workers))
    wait_until(lambda: done() >= before + 5, 120, f"jobs to go on ending after {what}")
    down_s, ended = time.time() - killed_at, done() - before

    # Only assignments logged after the restart count: the killed scheduler's log still holds its old one.
    names = ("scheduler", "scheduler-2")
    offsets = {n: log_size(cluster, n) for n in names}
    t0 = time.monotonic()
    started = cluster.up()
    assert sorted(started) == sorted(victims), f"`infra up` started {started}, not just {victims}"
    lb = cluster.component("haproxy")
    assignment = lambda: {n: owned(cluster, n, offsets[n]) for n in names}  # noqa: E731

    def group_whole() -> bool:
        mine = assignment()
        return (all(mine.values()) and sum(len(p) for p in mine.values()) == s.partitions  # type: ignore[arg-type]
                and set().union(*mine.values()) == set(range(s.partitions)))  # type: ignore[arg-type]

    def whole() -> bool:
        try:
            balanced = sorted(st[:2] for st in lb.servers().values()) == ["UP", "UP"]
        except Exception:  # noqa: BLE001 - the stats socket not answering yet
            return False
        return balanced and group_whole() and healed(cluster, tuple(victims))

    wait_until(whole, 180, f"the cluster to heal after {', '.join(victims)} are back", every=1.0,
               on_timeout=lambda: f"haproxy {lb.servers()}; schedulers {assignment()}; "
                                  f"under-replicated {under_replicated(s)}; hints {hint_files(cluster)}")
    healed_s = time.monotonic() - t0
    # The restarted scheduler serves: every partition grants a lease once the group has its two members.
    settled_ms = int(time.time() * 1000)
    wait_until(lambda: all(first_lease_on(log, {p}, s.partitions, settled_ms) is not None
                           for p in range(s.partitions)),
               120, "every partition to grant a lease after the restart", every=0.5,
               on_timeout=lambda: f"schedulers {assignment()}")
    say(f"all four at once ({', '.join(victims)}) kill -9: dispatching again {anywhere.at - killed_at:.1f} s "
        f"after the kill; on {scheduler}'s partitions {sorted(its_partitions)} {on_its:.1f} s; to a worker "
        f"{gateway} served ({len(its_workers)} of {len(workers)}) {its_worker.at - killed_at:.1f} s; a real "
        f"render leased {real_again:.1f} s after the kill and finished before the restart; {ended} jobs ended "
        f"in the {down_s:.0f} s they were down; healed {healed_s:.1f} s after `infra up` (both gateways UP, "
        f"schedulers {({n: sorted(p or ()) for n, p in assignment().items()})}, "
        f"every partition in sync, Cassandra 3 NORMAL, no hint left)")
