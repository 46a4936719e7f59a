"""One broker of the cluster profile's KRaft Kafka (`spotreel infra up --nodes 3`): broker and controller in one
process, node n on 127.0.0.1 at `settings.kafka_node_ports(n)`, the controller quorum of every node.

Same jars, JVM and config template as the single node (kafka.py); what differs is the node id, the ports, the
voters, the replication of the internal topics, a cluster id shared by every node, no controlled shutdown
(`down` stops every node at once, and the last broker would wait minutes for a quorum of controllers), and
that only node 1 declares the topics, once every broker is registered (replication factor 3 needs three).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from spotreel.platform import ports as portlib
from spotreel.devstack.kafka import Kafka
from spotreel.devstack.render import render
from spotreel.devstack.server import Say
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.platform.topics import admin_client


class KafkaNode(Kafka):
    def __init__(self, settings, node: int) -> None:
        super().__init__(settings)
        self.node = node
        self.name = f"kafka-{node}"

    @property
    def port(self) -> int:
        return self.settings.kafka_node_ports(self.node)[0]

    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    def ports(self) -> list[int]:
        return list(self.settings.kafka_node_ports(self.node))

    def voters(self) -> str:
        s = self.settings
        return ",".join(f"{n}@{s.host}:{s.kafka_node_ports(n)[1]}" for n in range(1, s.cluster_nodes + 1))

    def render_server_properties(self) -> str:
        s = self.settings
        port, controller = s.kafka_node_ports(self.node)
        return render("kafka-server.properties", host=s.host, port=port, controller_port=controller,
                      log_dirs=self.kraft_dir, partitions=s.partitions, node_id=self.node, voters=self.voters(),
                      replication=s.kafka_rf, min_isr=s.kafka_min_isr,
                      controlled_shutdown="false")

    def cluster_id_file(self) -> Path:
        """One id for every node of the cluster, made by whichever node formats first."""
        return self.layout.data_root / "kafka-cluster.id"

    def keep_cluster_id(self, path: Path, cid: str) -> str:
        tmp = path.with_name(f"{path.name}.{self.node}.tmp")
        tmp.write_text(cid + "\n")
        try:
            os.link(tmp, path)  # the first node to get here wins; the others read its id
        except FileExistsError:
            pass
        tmp.unlink()
        return path.read_text().strip()

    def probe(self, timeout: float) -> str:
        """This broker answers metadata requests and is registered (unfenced) in the cluster."""
        if not portlib.listening(self.settings.host, self.port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {self.address()}")
        from confluent_kafka import KafkaException

        try:
            md = admin_client(self.address(), timeout).list_topics(timeout=timeout)
        except KafkaException as exc:
            raise ProbeFailed(f"metadata request failed: {exc.args[0].str() if exc.args else exc}") from None
        if self.node not in md.brokers:
            raise ProbeFailed(f"broker {self.node} not registered yet ({len(md.brokers)} registered)")
        urp = sum(1 for t in md.topics.values() for p in t.partitions.values()
                  if p.leader < 0 or len(p.isrs) < len(p.replicas))
        return (f"cluster {md.cluster_id}, {len(md.brokers)} of {self.settings.cluster_nodes} brokers, "
                f"{urp} under-replicated partitions")

    def setup(self, say: Say) -> None:
        if self.node != 1:
            return
        wait_for_brokers(self.settings, self.settings.start_timeout)
        super().setup(say)


def wait_for_brokers(settings, timeout: float) -> None:
    """Until every broker of the profile is registered: topics at replication factor 3 need three."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        try:
            seen = len(admin_client(settings.kafka_bootstrap, 5.0).list_topics(timeout=5.0).brokers)
            if seen >= settings.cluster_nodes:
                return
        except Exception:  # noqa: BLE001 - not answering yet is retried like too few brokers
            pass
        if time.monotonic() > deadline:
            raise InfraError(f"kafka: {seen} of {settings.cluster_nodes} brokers registered after {timeout:.0f} s")
        time.sleep(0.5)
