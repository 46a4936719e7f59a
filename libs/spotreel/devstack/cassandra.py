"""Apache Cassandra 5.0, one node from the Maven jars, on Java 17 with a small heap."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from spotreel.platform import ports as portlib
from spotreel.platform.cql import cql_session
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.devstack.java import common_jvm_options, java_bin
from spotreel.devstack.maven import cassandra_bundle
from spotreel.devstack.render import render, write_if_changed
from spotreel.devstack.server import Say, Server
from spotreel.devstack.settling import settled

# From Cassandra's conf/jvm17-server.options: without these the JVM dies at start-up on Java 17.
JAVA17_MODULE_OPTIONS = [
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "-Djdk.attach.allowAttachSelf=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]


class Cassandra(Server):
    name = "cassandra"
    # Logged on every start without JMX (we run none: no nodetool, one port fewer).
    harmless = ("JMX is not enabled", "cassandra.jmx.local.port missing", "unable to start local JMX")

    def address(self) -> str:
        return f"{self.settings.host}:{self.settings.cassandra_port}"

    def ports(self) -> list[int]:
        return [self.settings.cassandra_port, self.settings.cassandra_storage_port]

    def main_log(self) -> Path:
        return self.logs_dir / "system.log"

    @property
    def yaml_path(self) -> Path:
        return self.conf_dir / "cassandra.yaml"

    @property
    def logback_path(self) -> Path:
        return self.conf_dir / "logback.xml"

    def render_yaml(self) -> str:
        s = self.settings
        return render("cassandra.yaml", host=s.host, storage_port=s.cassandra_storage_port,
                      native_port=s.cassandra_port, data_dir=self.data_dir, initial_token=0,
                      snitch="SimpleSnitch", seeds=f"{s.host}:{s.cassandra_storage_port}", hinted_handoff="false")

    def render_logback(self) -> str:
        return render("cassandra-logback.xml", log_file=self.main_log())

    def prepare(self, say: Say) -> None:
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("triggers", "tmp"):
            (self.conf_dir / sub).mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.yaml_path, self.render_yaml())
        write_if_changed(self.logback_path, self.render_logback())

    def preflight(self) -> None:
        java_bin(self.settings, self.name)

    def command(self) -> list[str]:
        s = self.settings
        bundle = cassandra_bundle(s)
        heap = s.cassandra_heap
        return [
            java_bin(s, self.name), f"-Xms{heap}", f"-Xmx{heap}", "-Xss256k",
            "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1",
            "-XX:MaxGCPauseMillis=300", "-XX:InitiatingHeapOccupancyPercent=70",
            *common_jvm_options(self.settings, self.logs_dir, self.conf_dir / "tmp"),
            "-Djava.net.preferIPv4Stack=true",
            *JAVA17_MODULE_OPTIONS,
            # jamm measures object sizes for memtable accounting; Cassandra refuses to run without it.
            f"-javaagent:{bundle.jar(s, 'jamm-')}",
            f"-Dcassandra.config=file://{self.yaml_path}",
            f"-Dcassandra.storagedir={self.data_dir}",
            f"-Dcassandra.logdir={self.logs_dir}",
            f"-Dlogback.configurationFile={self.logback_path}",
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.triggers_dir={self.conf_dir / 'triggers'}",
            # One node: no peers whose gossip could settle, so do not wait for it.
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-cp", bundle.classpath(s), "org.apache.cassandra.service.CassandraDaemon",
        ]

    def probe(self, timeout: float) -> str:
        s = self.settings
        if not portlib.listening(s.host, s.cassandra_port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {self.address()}")
        try:
            with cql_session(s, timeout) as session:
                row = session.execute("SELECT release_version FROM system.local", timeout=timeout).one()
        except Exception as exc:  # the driver raises many unrelated types for "not ready yet"
            raise ProbeFailed(f"CQL query failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        return f"Cassandra {row.release_version}"

    @contextmanager
    def schema_session(self):
        """(session, settle) the schema is applied through; a cluster node's goes through itself only."""
        with cql_session(self.settings, 20.0) as session:
            yield session, None

    def setup(self, say: Say) -> None:
        from spotreel.platform.migrate import migrate
        from spotreel.platform.seed import seed_dev_tenant

        s = self.settings

        def apply() -> None:
            with self.schema_session() as (session, settle):
                migrate(session, s.cassandra_keyspace, say, replication=s.cassandra_rf,
                        datacenter=s.cassandra_datacenter, settle=settle)
                seed_dev_tenant(session, s, say)

        try:
            # Just after a node joined or came back, a replica may lack a new table's schema (INCOMPATIBLE_SCHEMA)
            # or a quorum read may time out while it replays its commit log: every step is idempotent (settling.py).
            settled(apply, "cassandra", say)
        except InfraError:
            raise
        except Exception as exc:
            raise InfraError(f"cassandra: schema setup failed: {type(exc).__name__}: {str(exc)[:300]}",
                             [f"log: {self.main_log()}"]) from None
