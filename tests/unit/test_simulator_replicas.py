"""`spotreel simulate --replicas`: the private stack records a replica plan in its own home, so its services
expand to several processes (and HAProxy in front of several gateways) on ports outside its private block;
a bad count is refused before anything starts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.cli import main
from spotreel.devstack import replicas
from spotreel.devstack.haproxy import HAProxy
from spotreel.services.simulator.stack import PrivateStack
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


@pytest.fixture
def base(tmp_path):
    return replace(Settings(), home=tmp_path / "home")


def test_one_of_each_by_default_writes_no_plan(base):
    stack = PrivateStack(base, "r1", partitions=3, say=lambda _: None)
    assert stack.replicas.single
    assert [s.name for s in stack.servers] == ["scheduler", "projector", "gateway", "webhooks"]
    assert not replicas.plan_file(stack.settings).exists()


def test_two_gateways_and_two_schedulers_behind_haproxy_on_ports_of_their_own(base):
    counts = replicas.parse("gateway=2,scheduler=2")
    stack = PrivateStack(base, "r2", partitions=3, say=lambda _: None, replica_counts=counts)
    names = [s.name for s in stack.servers]
    assert names == ["scheduler", "scheduler-2", "projector", "gateway", "gateway-2", "webhooks", "haproxy"]
    haproxy = next(s for s in stack.servers if isinstance(s, HAProxy))
    assert haproxy.address() == stack.url  # the fleet and the clients go through HAProxy
    block = {stack.settings.gateway_port + i for i in range(5)}
    planned = [p for ports in stack.replicas.ports.values() for p in ports]
    assert len(planned) == len(set(planned)) == 2 * 2 + 1  # two gateways' public+metrics, scheduler-2's metrics
    assert not block & set(planned)
    # recorded in the private home only: the shared stack's plan is untouched
    assert replicas.load(stack.settings).counts == counts
    assert replicas.load(base).single


def test_a_bad_replica_count_is_refused_before_anything_starts(base, capsys, monkeypatch):
    monkeypatch.setenv("SPOTREEL_HOME", str(base.home))
    assert main(["simulate", "--replicas", "gateway=0"]) == 2
    assert "gateway=0" in capsys.readouterr().err
