"""The cluster profile under kill -9: a private 3-broker Kafka and 3-node Cassandra (`infra up --nodes 3`), with jobs
flowing through the real gateway, scheduler and projector to simulated workers. One Kafka broker is killed, then
one Cassandra node (node 1 of each: the first bootstrap server and the first contact point), then a broker and a
Cassandra node at once (node 2 of each); no operator acts while they are down. Then `infra up` restarts what
was killed and the cluster heals.

Checked: jobs acknowledged after each kill are dispatched while the node is down, and more jobs end; after the
restart no partition is under-replicated, and every Cassandra node is up and NORMAL with no hint left
undelivered; every job the API acknowledged (202) ends exactly once on the events topic (audit.py: versions
without gap or repeat, fencing, one terminal event) and the read model, read back at LOCAL_QUORUM, says it
succeeded.

Printed: seconds from each kill to the first lease of a job acknowledged after it ("dispatch again"), and from
`infra up` to healed.
"""

from __future__ import annotations

import threading
import time

import pytest

from spotreel.codec import Codec
from spotreel.devstack import ports as portlib
from tests.chaos.audit import audit
from tests.chaos.clusterkit import Grant, SimWorker, Submitter, cassandra_normal, get, under_replicated
from tests.chaos.wholekit import read_events, wait_until
from tests.harness.private_stack import PrivateStack, private_settings

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

WORKERS = 3
STEPS = 2
STEP_S = 0.3
RATE = 2.0  # submissions per second
# Alone, then together (other nodes: each node is killed once).
FAULTS = (("kafka broker", ("kafka-1",)), ("cassandra node", ("cassandra-1",)),
          ("kafka broker and cassandra node at once", ("kafka-2", "cassandra-2")))


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
        stack.up()
        yield stack
    finally:
        try:
            stack.down()
        finally:
            left = stack.leftovers()
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                time.sleep(0.5)
                left = stack.leftovers()
            assert not left, "the cluster left processes or listeners behind:\n" + "\n".join(left)


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


def test_the_cluster_survives_kill9_of_a_broker_and_of_a_cassandra_node(cluster, request):
    s = cluster.settings
    say = lambda line: emit(request.config, f"  [cluster chaos] {line}")  # noqa: E731
    grants: list[Grant] = []
    stop = threading.Event()
    workers = [SimWorker(s.gateway_url, grants, STEPS, STEP_S, stop) for _ in range(WORKERS)]
    submitter = Submitter(s.gateway_url, s.dev_api_key, RATE, STEPS)
    for t in (*workers, submitter):
        t.start()
    done = lambda: sum(w.completed for w in workers)  # noqa: E731
    try:
        wait_until(lambda: done() >= 5, 60, "the first jobs to end on the healthy cluster")
        for fault, killed in FAULTS:
            component = " and ".join(killed)
            killed_at = time.time()
            for name in killed:
                cluster.kill9(name)
            grant = wait_until(lambda: next((g for g in list(grants) if g.at > killed_at
                                             and submitter.accepted.get(g.job_id, 0) > killed_at), None),
                               120, f"a job acknowledged after the kill -9 of {component} to be dispatched")
            before = done()
            wait_until(lambda: done() >= before + 5, 120, f"jobs to go on ending with {component} down")
            down_s, ended = time.time() - killed_at, done() - before
            t0 = time.monotonic()
            cluster.up()
            wait_until(lambda: healed(cluster, killed), 120, f"the cluster to heal after {component} is back",
                       every=1.0)
            say(f"{fault} ({component}) kill -9: dispatching again {grant.at - killed_at:.1f} s after the kill; "
                f"{ended} jobs ended in the {down_s:.0f} s it was down; "
                f"healed {time.monotonic() - t0:.1f} s after `infra up`")
        submitter.stopping.set()
        submitter.join(120)
        accepted = dict(submitter.accepted)
        assert not submitter.is_alive() and len(accepted) >= 20, (len(accepted), submitter.refused)

        codec = Codec.default()
        terminal: set[str] = set()

        def all_ended() -> bool:
            events = read_events(s, codec)
            terminal.update(e.job_id for e in events if type(e).__name__ in ("JobSucceeded", "JobFailed",
                                                                            "JobCancelled", "JobDeadLettered"))
            return set(accepted) <= terminal

        wait_until(all_ended, 120, "every acknowledged job to end", every=2.0)
        report = audit(read_events(s, codec), accepted)
        assert not report.problems, report.problems[:10]
        assert report.outcomes() == {"JobSucceeded": len(accepted)}, report.outcomes()

        # No acknowledged write lost: the read model (LOCAL_QUORUM) has every job, and it says succeeded.
        def projected() -> list[str]:
            return [j for j in accepted
                    if (get(f"{s.gateway_url}/v1/videos/{j}", s.dev_api_key)[1] or {}).get("status") != "succeeded"]

        wait_until(lambda: not projected(), 60, "the read model to show every job succeeded", every=1.0)
        say(f"{len(accepted)} jobs acknowledged, each ended once (succeeded); {submitter.refused} refused; "
            f"worker errors (5xx or no answer) {sum(w.errors for w in workers)}")
    finally:
        stop.set()
        submitter.stopping.set()
        for t in (*workers, submitter):
            t.join(45)
