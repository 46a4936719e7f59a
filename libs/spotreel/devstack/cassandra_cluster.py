"""One node of the cluster profile's Cassandra (`spotreel infra up --nodes 3`): node n on its own loopback address
127.0.0.n (Linux routes all of 127.0.0.0/8 to lo), every node on the same ports.

Same jars, JVM and config template as the single node (cassandra.py); what differs: the address, one token per
node spread evenly over the ring (a fresh cluster joins without streaming: auto_bootstrap false), every node a
seed (they start at once, none waits for another to be up first), GossipingPropertyFileSnitch in the datacenter
the settings name, hinted handoff on, short gossip waits (`-Dcassandra.ring_delay_ms`), and that only node 1
applies the schema, once every node is up (the keyspace is created with replication factor 3).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from spotreel.platform import ports as portlib
from spotreel.devstack.cassandra import Cassandra
from spotreel.devstack.render import render, write_if_changed
from spotreel.devstack.server import Say
from spotreel.platform.errors import InfraError, ProbeFailed

# Gossip waits of a production node (30 s ring delay, up to a minute for gossip to settle) are for a ring
# of strangers; three loopback nodes of a fresh cluster know each other within a second.
RING_DELAY_MS = 3000


def initial_token(node: int, nodes: int) -> int:
    """Murmur3's ring (-2**63 .. 2**63-1) cut in `nodes` equal arcs; node n (1-based) starts arc n-1."""
    return -(2**63) + (node - 1) * (2**64 // nodes)


class CassandraNode(Cassandra):
    def __init__(self, settings, node: int) -> None:
        super().__init__(settings)
        self.node = node
        self.name = f"cassandra-{node}"

    def bind_host(self) -> str:
        return self.settings.cassandra_node_host(self.node)

    def address(self) -> str:
        return f"{self.bind_host()}:{self.settings.cassandra_port}"

    @property
    def rackdc_path(self):
        return self.conf_dir / "cassandra-rackdc.properties"

    def render_yaml(self) -> str:
        s = self.settings
        text = render("cassandra.yaml", host=self.bind_host(), storage_port=s.cassandra_storage_port,
                      native_port=s.cassandra_port, data_dir=self.data_dir,
                      initial_token=initial_token(self.node, s.cluster_nodes),
                      snitch="GossipingPropertyFileSnitch", hinted_handoff="true",
                      seeds=",".join(f"{s.cassandra_node_host(n)}:{s.cassandra_storage_port}"
                                     for n in range(1, s.cluster_nodes + 1)))
        return text

    def prepare(self, say: Say) -> None:
        super().prepare(say)
        write_if_changed(self.rackdc_path, f"dc={self.settings.cassandra_datacenter}\nrack=rack1\n")

    def command(self) -> list[str]:
        argv = super().command()
        main = argv.index("-cp")
        return [*argv[:main], f"-Dcassandra-rackdc.properties=file://{self.rackdc_path}",
                f"-Dcassandra.ring_delay_ms={RING_DELAY_MS}", *argv[main:]]

    def probe(self, timeout: float) -> str:
        """This node answers CQL on its own address (the driver is told to use no other)."""
        host, port = self.bind_host(), self.settings.cassandra_port
        if not portlib.listening(host, port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {self.address()}")
        try:
            with node_session(self.settings, host, timeout) as session:
                row = session.execute("SELECT release_version FROM system.local", timeout=timeout).one()
                gossip = [r.status_with_port or "" for r in
                          session.execute("SELECT status_with_port FROM system_views.gossip_info", timeout=timeout)]
        except Exception as exc:  # the driver raises many unrelated types for "not ready yet"
            raise ProbeFailed(f"CQL query failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        normal = sum(1 for g in gossip if g.startswith("NORMAL"))
        return f"Cassandra {row.release_version}, ring: {normal} of {len(gossip)} nodes joined (NORMAL)"

    def schema_session(self):
        return schema_session(self.settings, self.bind_host())

    def setup(self, say: Say) -> None:
        if self.node != 1:
            return
        wait_for_nodes(self.settings, self.settings.start_timeout)
        super().setup(say)


def node_session(settings, host: str, timeout: float):
    """A session that talks to `host` only (a probe of one node must not be answered by another)."""
    from contextlib import contextmanager

    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    @contextmanager
    def opened():
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]),
                                   request_timeout=max(timeout, 5.0))
        cluster = Cluster([host], port=settings.cassandra_port, protocol_version=5,
                          execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=timeout,
                          control_connection_timeout=timeout)
        try:
            yield cluster.connect()
        finally:
            cluster.shutdown()

    return opened()


@contextmanager
def schema_session(settings, host: str, timeout: float = 20.0):
    """(session, settle) for the migrations: every statement through `host`, which applies each change before
    it answers, so the next one finds it there; no wait for the other nodes after each statement (the driver's
    default: a gossip round per statement, which makes the schema's dozens of statements the slowest part of a
    cluster's start), one `settle` per migration
    instead, before its record is written at LOCAL_QUORUM and before anything else uses the tables."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster
    from cassandra.policies import WhiteListRoundRobinPolicy

    from spotreel.platform.cql import execution_profile

    profile = execution_profile(settings, max(timeout, 10.0))
    profile.load_balancing_policy = WhiteListRoundRobinPolicy([host])
    cluster = Cluster([host], port=settings.cassandra_port, protocol_version=5, max_schema_agreement_wait=0,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=timeout,
                      control_connection_timeout=timeout)

    def settle() -> None:
        if not cluster.control_connection.wait_for_schema_agreement(wait_time=60):
            raise InfraError("cassandra: the nodes did not agree on the schema within 60 s")

    try:
        session = cluster.connect()
        yield session, settle
        settle()
    finally:
        cluster.shutdown()


def nodes_up(settings, timeout: float = 5.0) -> int:
    """How many nodes of the profile the driver sees up (through whichever contact point answers)."""
    from spotreel.platform.cql import cql_session

    with cql_session(settings, timeout) as session:
        hosts = session.cluster.metadata.all_hosts()
        return sum(1 for h in hosts if h.is_up)


def wait_for_nodes(settings, timeout: float) -> None:
    """Until every node is up: the keyspace at replication factor 3 and its first writes at LOCAL_QUORUM."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        try:
            seen = nodes_up(settings)
            if seen >= settings.cluster_nodes:
                return
        except Exception:  # noqa: BLE001 - no node answering yet is retried like too few nodes
            pass
        if time.monotonic() > deadline:
            raise InfraError(f"cassandra: {seen} of {settings.cluster_nodes} nodes up after {timeout:.0f} s")
        time.sleep(1.0)
