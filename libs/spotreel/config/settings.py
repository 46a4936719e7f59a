"""Settings for every spotreel process, read from SPOTREEL_* environment variables.

One frozen dataclass, built once by an entrypoint and passed down; nothing reads the environment later.
What only the local launcher needs (JVM heaps and options, Maven and server versions, the servers' internal
ports, start and stop timeouts) is in spotreel.devstack.settings.DevstackSettings, a subclass of this one, so
runtime code never sees it. Every knob, with its variable: docs/SETTINGS.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from collections.abc import Mapping
from pathlib import Path
from typing import Self


def _default_home() -> Path:
    """$XDG_STATE_HOME/spotreel (~/.local/state/spotreel)"""
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "spotreel"


def _default_cache() -> Path:
    """$XDG_CACHE_HOME/spotreel (~/.cache/spotreel)"""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spotreel"


# botocore's retry modes that back off with jitter ("legacy" does not add jitter the same way and is not offered).
S3_RETRY_MODES = ("standard", "adaptive")


@dataclass(frozen=True)
class Settings:
    # Where the local stack keeps data, logs and pid files (one directory, wiped by `up --fresh`).
    home: Path = field(default_factory=_default_home)
    # Non-zero: CLIs show tracebacks of unexpected errors instead of one summarising line.
    debug: int = 0
    # The garbage collector's thresholds in the gateway, scheduler, projector, webhooks and fleet simulator
    # (young, middle, old; spotreel.runtime.gctune), with what start-up built frozen out of its sight. Empty: Python's
    # defaults (700,10,10), nothing frozen.
    gc_threshold: str = "7000,20,100"
    # The gateway's event loop (spotreel.runtime.eventloop): uvloop, or asyncio for the stock selector loop.
    event_loop: str = "uvloop"
    # Downloads (the local stack's jars, the tests' tiny models) live outside the repo and outside `home`, so
    # `--fresh` never refetches them.
    cache_dir: Path = field(default_factory=_default_cache)
    # The address the services bind to and every local server (and the clients' default view of them) is on.
    host: str = "127.0.0.1"

    # Port of the local stack's (first) Kafka broker.
    kafka_port: int = 19092
    # The CQL port of every Cassandra node, local or not (the contact points are hosts on it).
    cassandra_port: int = 19042
    # The keyspace every table lives in.
    cassandra_keyspace: str = "spotreel"

    # The cluster profile (devstack/cluster.py, `spotreel infra up --nodes 3`): how many Kafka brokers and
    # Cassandra nodes the local stack runs (Cassandra node n on 127.0.0.n with the same ports). 1: the
    # single-node stack.
    cluster_nodes: int = 1
    # Local broker n (n >= 2) listens on kafka_port + (n-1) * this (its controller likewise).
    kafka_node_port_step: int = 100
    # Clients' view of the brokers (comma-separated host:port), so the same code runs against managed
    # clusters. Empty: every broker of the local stack's profile.
    kafka_bootstrap_servers: str = ""
    # Clients' view of the Cassandra nodes (comma-separated hosts on cassandra_port). Empty: every node of the
    # local stack's profile.
    cassandra_contact_points: str = ""
    # The datacenter the Cassandra driver prefers (DCAwareRoundRobinPolicy) and the keyspace replicates in
    # (NetworkTopologyStrategy when its replication factor is above 1; SimpleSnitch's datacenter by default).
    cassandra_datacenter: str = "datacenter1"
    # Replication of every topic. 0: from the profile (min(cluster_nodes, 3)).
    kafka_replication_factor: int = 0
    # The topics' min.insync.replicas. 0: from the replication (2 when there are 3 replicas, else 1).
    kafka_min_insync_replicas: int = 0
    # Replication of the keyspace. 0: from the profile (min(cluster_nodes, 3)).
    cassandra_replication_factor: int = 0
    # Consistency of every read and write (the LWT claims' commit too): a quorum of the local datacenter's
    # replicas, so a write acknowledged survives one node lost (RF 3).
    cassandra_consistency: str = "LOCAL_QUORUM"
    # Consistency of the LWTs' Paxos round.
    cassandra_serial_consistency: str = "LOCAL_SERIAL"

    # Port of the local S3 server (SeaweedFS's S3 gateway); the clients' S3 endpoint is http://host:this
    # unless s3_endpoint_url says otherwise.
    s3_port: int = 18333
    # Clients' view of the S3 store (e.g. https://s3.eu-west-1.amazonaws.com), so the same code runs against
    # a managed store. Empty: the local stack's server, http://host:s3_port.
    s3_endpoint_url: str = ""
    # S3 access key of every client (and of the local server).
    s3_access_key: str = "spotreel"
    # S3 secret key of every client (and of the local server).
    s3_secret_key: str = "spotreel-secret"
    # S3 region the clients sign for.
    s3_region: str = "us-east-1"
    # Bucket of the finished videos.
    s3_bucket_artifacts: str = "spotreel-artifacts"
    # Bucket of the workers' checkpoints.
    s3_bucket_checkpoints: str = "spotreel-checkpoints"
    # botocore's retry mode of every S3 client: "standard" (exponential backoff with jitter on connection
    # errors, timeouts, throttling and 5xx) or "adaptive" (the same, plus client-side rate limiting after
    # throttling answers).
    s3_retry_mode: str = "standard"
    # Tries of one S3 call, the first included (botocore's total_max_attempts). The worker's checkpoints and
    # video upload retry further within their own time budgets (`spotreel worker --checkpoint-budget`,
    # `--storage-budget`).
    s3_max_attempts: int = 3
    # Milliseconds an S3 client waits for a connection.
    s3_connect_timeout_ms: int = 2_000
    # Milliseconds an S3 client waits for the store's next bytes: a stopped store (SIGSTOP, a hung node)
    # accepts connections but never answers, and only this notices it (botocore's default is 60 s).
    s3_read_timeout_ms: int = 5_000

    # Port of the gateway's public API (and the base of the local stack's metrics ports: + 1 to + 4).
    gateway_port: int = 18700
    # Key of the gateway's page tokens (share it between gateway replicas); empty: one per process.
    gateway_token_key: str = ""
    # 1: webhooks may go to loopback/private/link-local addresses (the local stack and tests); 0 refuses them.
    webhook_allow_private: int = 0
    # 1: a job's prompt, negative prompt and callback URL travel encrypted under a data key of its own
    # (spotreel/personal/, docs/decisions/0035-crypto-shredding.md); 0: in plain text, as a deployment without
    # erasure. Records of either kind are read either way.
    personal_encryption: int = 1
    # The key-encryption key file that wraps the data keys (32 bytes, base64). Empty: home/keys/kek, made at
    # the first start of a keystore that holds no key yet; a keystore with keys and no file refuses to start.
    kek_file: str = ""
    # The key-encryption key being rotated away from (`spotreel keys rotate`): data keys it still wraps open.
    kek_previous_file: str = ""
    # Seconds a process keeps an unwrapped data key: how long a job erased elsewhere may still be opened here.
    data_key_cache_seconds: int = 30
    # API key of the development tenant `dev` that the local stack seeds; the client commands' default key.
    dev_api_key: str = "sr_dev_local_key_not_secret"

    # `spotreel worker`: the gateway it asks for work (empty: this stack's gateway).
    worker_gateway_url: str = ""
    # `spotreel worker`: its key for the /internal API (empty: the local stack's development worker key).
    worker_key: str = ""
    # `spotreel worker`: its diffusers model directory (empty: the tiny model, built on first use under
    # home/models/tiny-t2v).
    worker_model_dir: str = ""
    # `spotreel worker`: key=value pairs (`;` between them) laid over the numerical environment it states
    # (domain/resume_match.py: device, dtype, torch, ...) and over its checkpoints', e.g. `device=cuda;dtype=float16`.
    # For tests: a worker of another fingerprint without other hardware (the render itself is unchanged). Empty: none.
    worker_fingerprint_override: str = ""
    # `spotreel worker`: how it reaches the control plane ("http" through the gateway, or "kafka" directly
    # for internal pools).
    worker_transport: str = "http"
    # `spotreel worker`: whose preemption notices it reads from the instance metadata service: aws, gcp,
    # azure, off, or auto: the cloud the machine's DMI files (/sys/class/dmi/id) name, off on none. Never
    # found by a network probe (worker/README.md, "Cloud preemption notices").
    cloud_notices: str = "auto"
    # `spotreel worker`: base URL of the instance metadata service the notices are read from (empty: the
    # cloud's own, http://169.254.169.254 for AWS and Azure, http://metadata.google.internal for GCP).
    metadata_endpoint: str = ""
    # The operator's model registry (TOML, spotreel/model_registry.py): the gateway validates submissions
    # against it, `spotreel model list` prints it, `spotreel worker --model NAME` loads from it. Empty: none.
    model_registry: str = ""

    # First part of every topic's name (`spotreel.commands`, ...).
    topic_prefix: str = "spotreel"
    # Partitions of every keyed topic (and so the scheduler's unit of parallelism).
    partitions: int = 6
    # Faust tables of the scheduler whose compacted changelog topics `infra up` declares ahead of time
    # (comma-separated); see spotreel.platform.topics.changelog_topic for the naming convention.
    scheduler_tables: str = "jobs"
    # 1: the scheduler writes every accepted renewal to the job's history as an event, as it did before
    # renewals that change only the deadline were answered on the replies topic (domain/renewals.py); for an
    # audit that wants every heartbeat, and the benchmark's baseline. 0 (default): absorb them.
    scheduler_persist_renewals: int = 0
    # Progress that moves only the step and percentage is written to the job's history at most once per this
    # many seconds (and per half the job's stuck floor); the reports in between are answered on the replies
    # topic and kept in memory until the job's next event (domain/renewals.py). 0: every step is an event.
    scheduler_progress_persist_s: int = 30
    # A lease whose holder came through a gateway that has not vouched past its deadline (GatewayPulse) is
    # expired at most this many seconds late, and a renewal through a gateway is judged at the worker's send
    # time, at most this much before its append time (services/scheduler/intake.py). 0: append times only.
    scheduler_gateway_hold_s: int = 30
    # Half-life (seconds) of the GPU-seconds a tenant used, in the scheduler's fair share across partitions
    # (domain/fairness.py); 0: no decay, the plain cumulative total.
    fair_share_half_life_s: int = 3600
    # Priority preemption (domain/preemption.py): at most this many leases asked back per pool in any rolling
    # minute (0: no preemption).
    preempt_per_minute: int = 2
    # Preemption never asks back a lease granted less than this many seconds ago.
    preempt_min_run_s: int = 60
    # Fair-share preemption (domain/preemption.plan_fair): a lease of a tenant whose share is at least this many
    # times that of a tenant waiting in the pool (and larger) is asked back for it, within the same budget.
    # 0 (default): off.
    preempt_fair_share_ratio: int = 0
    # Dispatch order (domain/job_choice.py, aging.py), in every scheduler partition and in the gateway's queue
    # position. Graded aging: a queued job gains one priority tier per this many seconds waited, so an old
    # low-priority job overtakes newer higher ones. 0 (default): off (tiers cross tenants; a credit per
    # minute in a backlog of minutes would rank jobs by age across tenants and undo their weights).
    dispatch_aging_step_s: int = 0
    # The most tiers graded aging may add to a job's priority. -1: no bound.
    dispatch_aging_max_boost: int = -1
    # Starvation bound: a job queued this many seconds is overdue and goes before everything its worker may
    # run except older overdue jobs, whatever its tier, share or model. 0: no bound.
    dispatch_max_wait_s: int = 1800
    # 1: a worker with a model loaded is offered that model's jobs first (a model switch only when none is
    # left); 0: warmth only breaks ties between tenants of equal share.
    dispatch_model_affinity: int = 1
    # Resume affinity (domain/resume_match.py): a job whose newest checkpoint was made on another environment
    # than the asking worker's is kept for an idle worker of the pool that matches it, at most this many
    # seconds of the job's wait; after that any worker takes it (from the newest checkpoint it can use, or
    # step 0). 0: never held.
    dispatch_resume_hold_s: int = 10
    # Bounded state (domain/retention.py): a terminal job leaves the scheduler's table (a tombstone in its
    # compacted changelog) this many seconds after its last change. The events topic keeps the whole history
    # either way. Memory per job in the table: bench/README.md, "Scheduler: bounded state".
    scheduler_retention_s: int = 86_400
    # A summary of a terminal job (outcome, version, request hash; about 0.7 KB) stays this many seconds after
    # its last change, for idempotent resubmission and late DAG children.
    scheduler_summary_retention_s: int = 3 * 86_400
    # Milliseconds the scheduler's producer waits to fill a batch per partition before sending it (aiokafka's
    # linger). 0: each send goes at once; more: fewer, larger produce requests, each batch's acks that much
    # later (bench/README.md, "Scheduler: commands through the batch loop").
    scheduler_producer_linger_ms: int = 0
    # A path: the scheduler runs under cProfile and writes its statistics there when it stops (a diagnostic
    # for `bench/scheduler_bench.py --profile`; the profiler slows the scheduler). Empty (default): none.
    scheduler_profile: str = ""
    # The janitor (services/janitor, inside `spotreel webhooks`): how often it sweeps the checkpoint and artifact
    # buckets for what is due only later (failed jobs' checkpoints, expired videos; domain/expiry.py).
    janitor_sweep_every_s: int = 600

    def kafka_node_port(self, node: int) -> int:
        """The port of local broker `node` (1-based)."""
        return self.kafka_port + (node - 1) * self.kafka_node_port_step

    def cassandra_node_host(self, node: int) -> str:
        """The loopback address of local Cassandra node `node` (1-based): 127.0.0.n (Linux routes 127/8 to lo)."""
        if node == 1:
            return self.host
        return f"127.0.0.{node}"

    @property
    def kafka_bootstrap(self) -> str:
        if self.kafka_bootstrap_servers:
            return self.kafka_bootstrap_servers
        nodes = range(1, max(1, self.cluster_nodes) + 1)
        return ",".join(f"{self.host}:{self.kafka_node_port(n)}" for n in nodes)

    @property
    def cassandra_hosts(self) -> list[str]:
        """Contact points of the Cassandra driver (all on cassandra_port)."""
        if self.cassandra_contact_points:
            return [h.strip() for h in self.cassandra_contact_points.split(",") if h.strip()]
        return [self.cassandra_node_host(n) for n in range(1, max(1, self.cluster_nodes) + 1)]

    @property
    def kafka_rf(self) -> int:
        return self.kafka_replication_factor or min(max(1, self.cluster_nodes), 3)

    @property
    def kafka_min_isr(self) -> int:
        return self.kafka_min_insync_replicas or (2 if self.kafka_rf >= 3 else 1)

    @property
    def cassandra_rf(self) -> int:
        return self.cassandra_replication_factor or min(max(1, self.cluster_nodes), 3)

    @property
    def s3_endpoint(self) -> str:
        return self.s3_endpoint_url or self.local_s3_endpoint

    @property
    def local_s3_endpoint(self) -> str:
        """The local stack's S3 server, which the launcher starts and probes whatever the clients are told."""
        return f"http://{self.host}:{self.s3_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://{self.host}:{self.gateway_port}"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        env = dict(os.environ if env is None else env)
        kwargs: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"SPOTREEL_{f.name.upper()}")
            if raw is None:
                continue
            if f.type == "Path":
                kwargs[f.name] = Path(raw).expanduser()
            elif f.type == "int":
                try:
                    kwargs[f.name] = int(raw)
                except ValueError:
                    raise ValueError(f"SPOTREEL_{f.name.upper()} must be an integer, got {raw!r}") from None
            else:
                kwargs[f.name] = raw
        if "event_loop" in kwargs:
            from spotreel.runtime.eventloop import check

            check(str(kwargs["event_loop"]))  # refused at start, with the variable's name
        if kwargs.get("s3_retry_mode", "standard") not in S3_RETRY_MODES:
            raise ValueError(f"SPOTREEL_S3_RETRY_MODE must be one of {', '.join(S3_RETRY_MODES)}, "
                             f"got {kwargs['s3_retry_mode']!r}")
        if "gc_threshold" in kwargs:
            from spotreel.runtime.gctune import parse

            parse(str(kwargs["gc_threshold"]))  # refused at start, with the variable's name
        return cls(**kwargs)
