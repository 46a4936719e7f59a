"""Tenant plans at runtime against the real Cassandra, Kafka and scheduler: `spotreel tenant create --plan free`
and `spotreel tenant set` (the CLI, as a subprocess) write the row the gateway reads and publish the settings
the scheduler reads; the scheduler holds the tenant to its in-flight ceiling across partitions, and a raised
ceiling takes effect without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.migrate import migrate
from spotreel.platform.seed import api_key_hash
from spotreel.platform.topics import tenants_topic
from spotreel.services.gateway.cassandra_store import CassandraAuth
from spotreel.tenancy import tenant_plan
from tests.integration.schedkit import ROOT, Bus, SchedulerProc, drop_topics, make_topics, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def plan_settings(settings, unique, cql):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2)
    make_topics(s)
    migrate(cql, unique, say=lambda *_: None)
    yield s
    drop_topics(s)


def cli(s, *args: str, command: str = "tenant") -> str:
    env = dict(os.environ, SPOTREEL_TOPIC_PREFIX=s.topic_prefix, SPOTREEL_CASSANDRA_KEYSPACE=s.cassandra_keyspace,
               SPOTREEL_PARTITIONS=str(s.partitions))
    done = subprocess.run([sys.executable, "-m", "spotreel.cli", command, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def published(s) -> list[ev.TenantSettings]:
    cons = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "plans-test", "enable.auto.commit": False})
    cons.assign([TopicPartition(tenants_topic(s), p, OFFSET_BEGINNING) for p in range(s.partitions)])
    try:
        return [Codec.default().decode_message(m.value()) for m in cons.consume(100, 5.0) if not m.error()]
    finally:
        cons.close()


def test_plans_are_stored_published_and_read_by_the_gateway(plan_settings, cql):
    out = cli(plan_settings, "create", "acme", "--plan", "free")
    key = out.split("store it now):\n", 1)[1].splitlines()[0]
    assert "plan free, weight 1, max in flight 2, 30/min, priority up to 4" in out
    assert cli(plan_settings, "set", "acme", "--weight", "2").count("plan free, weight 2, max in flight 2") == 1
    cli(plan_settings, "set", "acme", "--plan", "pro")
    plan = tenant_plan(cql, "acme")
    assert (plan.name, plan.weight, plan.max_in_flight, plan.rate_per_minute, plan.max_priority) == (
        "pro", 3.0, 20, 600, 7)
    records = published(plan_settings)
    assert [(r.plan, r.weight, r.max_in_flight) for r in records] == [("free", 1.0, 2), ("free", 2.0, 2),
                                                                     ("pro", 3.0, 20)]
    tenant = asyncio.run(CassandraAuth(cql).tenant_for_key_hash(api_key_hash(key)))
    assert (tenant.plan, tenant.max_priority, tenant.rate_per_minute, tenant.max_in_flight) == ("pro", 7, 600, 20)


def test_the_in_flight_ceiling_holds_across_partitions_and_a_change_applies_without_a_restart(
        plan_settings, tmp_path):
    s = plan_settings
    cli(s, "create", "acme", "--plan", "free")  # at most 2 leases at a time
    proc = SchedulerProc(s, tmp_path)
    bus = Bus(s)
    try:
        proc.wait_owning({0, 1})
        jobs = [submit("acme", f"k{i}") for i in range(8)]
        assert {partition_for(j.job_id, 2) for j in jobs} == {0, 1}
        for job in jobs:
            bus.send(job)
        got = [bus.request_work(f"w{i}", timeout=4.0) for i in range(4)]
        leased = [a for a in got if isinstance(a, ev.WorkAssigned)]
        assert len(leased) == 2, got
        assert all(isinstance(a, ev.NoWorkAvailable) and a.reason == "no_queued_job" for a in got
                   if not isinstance(a, ev.WorkAssigned))
        cli(s, "set", "acme", "--max-in-flight", "4")
        more = [bus.request_work(f"x{i}", timeout=10.0) for i in range(2)]
        assert all(isinstance(a, ev.WorkAssigned) for a in more), more
        assert isinstance(bus.request_work("x2", timeout=3.0), ev.NoWorkAvailable)  # 4 held: the new ceiling
        # The operators' view of the same reports the scheduler sums.
        [row] = [json.loads(line) for line in cli(s, "--json", "--tenant", "acme", command="usage").splitlines()]
        assert (row["tenant"], row["leases_held"], row["used_gpu_seconds"]) == ("acme", 4, 0.0)
        assert row["fair_share_gpu_seconds"] == 4 * 60.0  # no run measured yet: each lease counts 60 s
    except BaseException:
        print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-4000:]}")
        raise
    finally:
        bus.close()
        proc.stop()


async def test_tenant_list_disable_and_worker_key_list_revoke(plan_settings, cql):
    """The operator commands over the stored columns, as the gateway's own auth store then reads them."""
    from spotreel.platform.seed import api_key_hash
    from spotreel.services.gateway.cassandra_store import CassandraAuth

    key = cli(plan_settings, "create", "acme", "--plan", "pro").splitlines()[1]
    [row] = [json.loads(line) for line in cli(plan_settings, "list", "--json").splitlines()]
    assert (row["tenant"], row["plan"], row["disabled"], row["webhook_secret"]) == ("acme", "pro", False, True)
    assert "acme" in cli(plan_settings, "list") and "max_in_flight" in cli(plan_settings, "list")
    auth = CassandraAuth(cql)
    assert not (await auth.tenant_for_key_hash(api_key_hash(key))).disabled
    cli(plan_settings, "disable", "acme")
    assert (await auth.tenant_for_key_hash(api_key_hash(key))).disabled
    assert json.loads(cli(plan_settings, "list", "--json"))["disabled"] is True
    cli(plan_settings, "enable", "acme")
    assert not (await auth.tenant_for_key_hash(api_key_hash(key))).disabled

    worker = cli(plan_settings, "create", "fleet-a", command="worker-key").splitlines()[1]
    [listed] = [json.loads(line) for line in cli(plan_settings, "list", "--json", command="worker-key").splitlines()]
    assert (listed["name"], listed["prefix"], listed["revoked_at"]) == ("fleet-a", worker[:8], None)
    assert await auth.worker_key_name(api_key_hash(worker)) == "fleet-a"
    assert cli(plan_settings, "revoke", "fleet-a", command="worker-key").strip() == "worker key fleet-a: 1 revoked"
    assert await auth.worker_key_name(api_key_hash(worker)) is None
    [listed] = [json.loads(line) for line in cli(plan_settings, "list", "--json", command="worker-key").splitlines()]
    assert listed["revoked_at"] is not None
