"""Apache Kafka in KRaft mode: one process that is broker and controller, from the Maven jars."""

from __future__ import annotations

import base64
import re
import subprocess
import uuid
from pathlib import Path

from spotreel.platform import ports as portlib
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.devstack.java import common_jvm_options, java_bin
from spotreel.devstack.loggist import gist
from spotreel.devstack.maven import kafka_bundle
from spotreel.devstack.render import render, write_if_changed
from spotreel.devstack.server import Say, Server
from spotreel.devstack.settling import settled
from spotreel.platform.topics import admin_client

# Kafka's Uuid.toString: base64url of 16 bytes, no padding; ids starting with '-' confuse its CLI parser.
CLUSTER_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{21}$")


def new_cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if CLUSTER_ID.match(cid):
            return cid


class Kafka(Server):
    name = "kafka"

    def address(self) -> str:
        return self.settings.kafka_bootstrap

    def ports(self) -> list[int]:
        return [self.settings.kafka_port, self.settings.kafka_controller_port]

    def main_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def tmp_dir(self) -> Path:
        return self.conf_dir / "tmp"

    @property
    def kraft_dir(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def server_properties(self) -> Path:
        return self.conf_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.conf_dir / "log4j.properties"

    def render_server_properties(self) -> str:
        s = self.settings
        return render("kafka-server.properties", host=s.host, port=s.kafka_port,
                      controller_port=s.kafka_controller_port, log_dirs=self.kraft_dir,
                      partitions=s.partitions, node_id=1, voters=f"1@{s.host}:{s.kafka_controller_port}",
                      replication=1, min_isr=1, controlled_shutdown="true")

    def render_log4j(self) -> str:
        return render("kafka-log4j.properties", log_file=self.main_log())

    def cluster_id(self) -> str:
        """The id this node's storage was (or will be) formatted with; made once, then kept."""
        meta = self.kraft_dir / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        path = self.cluster_id_file()
        if path.exists() and CLUSTER_ID.match(path.read_text().strip()):
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.keep_cluster_id(path, new_cluster_id())

    def cluster_id_file(self) -> Path:
        """Where the id is kept from its making until the storage is formatted with it."""
        return self.data_dir / "cluster.id"

    def keep_cluster_id(self, path: Path, cid: str) -> str:
        """Writes a new id to `path`; the id kept there."""
        path.write_text(cid + "\n")
        return cid

    def jvm(self, main_class: str, *args: str) -> list[str]:
        heap = self.settings.kafka_heap
        return [
            java_bin(self.settings, self.name), f"-Xms{heap}", f"-Xmx{heap}",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            *common_jvm_options(self.settings, self.logs_dir, self.tmp_dir),
            f"-Dkafka.logs.dir={self.logs_dir}", f"-Dlog4j.configuration=file:{self.log4j_properties}",
            "-cp", kafka_bundle(self.settings).classpath(self.settings), main_class, *args,
        ]

    def prepare(self, say: Say) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.server_properties, self.render_server_properties())
        write_if_changed(self.log4j_properties, self.render_log4j())
        if (self.kraft_dir / "meta.properties").exists():
            return
        cid = self.cluster_id()
        say(f"kafka: formatting storage in {self.kraft_dir} (cluster id {cid})")
        log = self.logs_dir / "format.log"
        cmd = self.jvm("kafka.tools.StorageTool", "format", "--cluster-id", cid,
                       "--config", str(self.server_properties), "--ignore-formatted")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, cwd=self.conf_dir, timeout=120)
        log.write_text(proc.stdout)
        if proc.returncode != 0:
            raise InfraError(f"kafka: formatting storage failed (exit code {proc.returncode})",
                             [*gist(proc.stdout), f"log: {log}"])

    def preflight(self) -> None:
        java_bin(self.settings, self.name)

    def command(self) -> list[str]:
        return self.jvm("kafka.Kafka", str(self.server_properties))

    def probe(self, timeout: float) -> str:
        s = self.settings
        if not portlib.listening(s.host, s.kafka_port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {s.kafka_bootstrap}")
        from confluent_kafka import KafkaException

        try:
            md = admin_client(s.kafka_bootstrap, timeout).list_topics(timeout=timeout)
        except KafkaException as exc:
            raise ProbeFailed(f"metadata request failed: {exc.args[0].str() if exc.args else exc}") from None
        if not md.brokers:
            raise ProbeFailed("no broker registered yet")
        return f"cluster {md.cluster_id}"

    def setup(self, say: Say) -> None:
        from spotreel.platform.topics import ensure_topics

        settled(lambda: ensure_topics(self.settings, say), "kafka", say)
