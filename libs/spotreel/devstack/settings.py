"""The local launcher's own settings: what starts the servers of the local stack, which no runtime process
needs (JVM heaps and options, the Kafka and Cassandra releases, the servers' internal ports, Maven, start and
stop timeouts).

DevstackSettings is Settings plus these, read from the same SPOTREEL_<NAME> variables (`from_env`, and
devstack.services passes all of them on to the processes `infra up` starts), so the runtime Settings carries
only what a client or service uses: its endpoints, its keyspace and topics, its policies. Code of the
launcher that is handed a plain Settings (a test's, a CLI's) takes the launcher's knobs from the environment
with `launcher_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from spotreel.config.settings import Settings


@dataclass(frozen=True)
class DevstackSettings(Settings):
    # The java the local stack runs its JVMs with: a name on PATH or an absolute path.
    java_bin: str = "java"
    # The Maven the local stack fetches its jars with: a name on PATH or an absolute path.
    maven_bin: str = "mvn"
    # Empty: Maven's own configuration decides (Central, or the user's mirror in ~/.m2/settings.xml).
    maven_repo_url: str = ""
    # The Go toolchain (1.23+) that builds AWS's EC2 metadata mock for the tests (`go install`, once per
    # version, into the cache dir): a name on PATH or an absolute path; /usr/local/go/bin/go when not on PATH.
    go_bin: str = "go"
    # Seconds `up` waits for a server to answer; Cassandra's cold start on 2 cores is the long pole.
    start_timeout: int = 240
    # Seconds `down` waits after SIGTERM before SIGKILL.
    stop_timeout: int = 60
    # 0: the JVMs compile hot code with C2, as a server should run (at the fleet's peak the broker takes a third
    # less CPU, Cassandra a fifth once warm). 1: C1 only, for many short-lived servers: what the test suite uses.
    jvm_fast_start: int = 0
    # Extra options for every JVM the local stack starts (space-separated), e.g. to attach a profiler.
    jvm_extra_opts: str = ""

    # Kafka release the local stack runs (pinned: the latest 3.9 patch release on Maven Central).
    kafka_version: str = "3.9.2"
    # Port of the local stack's (first) KRaft controller.
    kafka_controller_port: int = 19093
    # Heap of each local Kafka broker's JVM (-Xmx and -Xms).
    kafka_heap: str = "768m"

    # Cassandra release the local stack runs (pinned: the latest 5.0 patch release on Maven Central).
    cassandra_version: str = "5.0.9"
    # Inter-node (gossip) port of the local Cassandra nodes.
    cassandra_storage_port: int = 17000
    # Heap of each local Cassandra node's JVM.
    cassandra_heap: str = "1g"

    # Port of the local SeaweedFS master.
    s3_master_port: int = 19333
    # Port of the local SeaweedFS volume server.
    s3_volume_port: int = 18080
    # Port of the local SeaweedFS filer.
    s3_filer_port: int = 18888
    # `weed mini` always runs its admin server; pin its port so it cannot collide with anything else.
    s3_admin_port: int = 18646

    # Port of the local moto server (`moto[server]`: the EC2 and SSM APIs the EC2 capacity provider's tests
    # talk to); the tests start private ones on free ports.
    moto_port: int = 18960

    # Port of the local stack's Prometheus (`spotreel infra monitoring`).
    prometheus_port: int = 9590
    # Port of the local stack's Alertmanager (`spotreel infra monitoring`).
    alertmanager_port: int = 9593

    def kafka_node_ports(self, node: int) -> tuple[int, int]:
        """(broker port, controller port) of local broker `node` (1-based)."""
        shift = (node - 1) * self.kafka_node_port_step
        return self.kafka_port + shift, self.kafka_controller_port + shift


def launcher_settings(settings: Settings) -> DevstackSettings:
    """`settings` itself when it is a DevstackSettings; else its runtime settings with the launcher's knobs
    from the environment."""
    if isinstance(settings, DevstackSettings):
        return settings
    runtime = {f.name: getattr(settings, f.name) for f in fields(Settings)}
    return replace(DevstackSettings.from_env(), **runtime)
