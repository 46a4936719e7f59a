"""`infra up --replicas`: the plan (counts, ports kept across restarts), the processes it expands to, and the
HAProxy configuration in front of several gateways, checked by the real `haproxy -c` (Debian's haproxy
package; tools/system-packages installs it when it is missing)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest

from spotreel.devstack import replicas
from spotreel.devstack.haproxy import HAProxy, haproxy_binary
from spotreel.devstack.replicated import expand
from spotreel.devstack.services import services
from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


@pytest.fixture
def settings(tmp_path):
    return replace(Settings(), home=tmp_path / "home", gateway_port=23700)


def test_parse_fills_in_one_of_each_and_refuses_what_is_not_a_count():
    assert replicas.parse("gateway=2, scheduler=3") == {"gateway": 2, "scheduler": 3, "projector": 1, "webhooks": 1}
    assert replicas.parse("") == dict.fromkeys(replicas.SERVICES, 1)
    for bad in ("gateway", "gateway=0", "gateway=x", "worker=2", f"webhooks={replicas.MAX_REPLICAS + 1}"):
        with pytest.raises(InfraError):
            replicas.parse(bad)


def test_no_plan_changes_nothing(settings):
    assert [c.name for c in services(settings)] == ["scheduler", "projector", "gateway", "webhooks"]


def test_a_plan_expands_to_named_replicas_on_distinct_ports_and_survives_a_reload(settings):
    counts = replicas.parse("gateway=2,scheduler=2,projector=2,webhooks=3")
    plan = replicas.make_plan(settings, counts, taken={settings.gateway_port + 10})
    replicas.save(settings, plan)
    comps = services(settings)
    assert [c.name for c in comps] == ["scheduler", "scheduler-2", "projector", "projector-2", "gateway",
                                       "gateway-2", "webhooks", "webhooks-2", "webhooks-3", "haproxy"]
    ports = [p for c in comps for p in c.ports()]
    assert len(ports) == len(set(ports)), ports
    assert settings.gateway_port + 10 not in ports  # taken by something else
    lb = comps[-1]
    assert isinstance(lb, HAProxy) and lb.ports() == [settings.gateway_port]
    assert lb.address() == settings.gateway_url
    gateways = [c for c in comps if c.name.startswith("gateway")]
    assert all(c.address() != settings.gateway_url for c in gateways)
    assert {c.env()["SPOTREEL_GATEWAY_TOKEN_KEY"] for c in gateways} == {plan.token_key}  # one key for all
    assert {c.data_dir for c in comps if c.name.startswith("scheduler")} == {
        settings.home / "data" / "scheduler", settings.home / "data" / "scheduler-2"}
    # A restarted stack, and a plan grown by one, keep every process's ports.
    assert replicas.load(settings) == plan
    grown = replicas.make_plan(settings, {**counts, "scheduler": 3}, replicas.load(settings))
    assert all(grown.ports[k] == v for k, v in plan.ports.items())
    assert grown.token_key == plan.token_key
    # All 1 again: the file goes, and with it every replica.
    replicas.save(settings, replicas.make_plan(settings, replicas.parse("")))
    assert not replicas.plan_file(settings).exists()
    assert len(services(settings)) == 4


def test_one_gateway_needs_no_load_balancer(settings):
    plan = replicas.make_plan(settings, replicas.parse("scheduler=2"))
    names = [c.name for c in expand(settings, services(settings), plan)]
    assert "haproxy" not in names and names.count("gateway") == 1 and "scheduler-2" in names
    assert plan.token_key == ""


def test_haproxy_accepts_the_configuration(settings, tmp_path):
    assert shutil.which("haproxy") or haproxy_binary(), "apt-get install -y haproxy (make test runs tools/system-packages)"
    lb = HAProxy(settings, [("gateway", 23711), ("gateway-2", 23713)])
    lb.prepare(print)
    text = lb.config_file.read_text()
    assert "balance uri depth 3" in text and "hash-type consistent" in text
    assert f"bind 127.0.0.1:{settings.gateway_port}" in text and "0.0.0.0" not in text
    done = subprocess.run([haproxy_binary(), "-c", "-f", str(lb.config_file)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_is_given_every_replica(settings):
    from spotreel.devstack.replicated import metrics_targets
    from spotreel.devstack.services import gateway_metrics_port, scheduler_metrics_port

    h = settings.host
    assert metrics_targets(settings)["gateway"] == [f"{h}:{gateway_metrics_port(settings)}"]
    plan = replicas.make_plan(settings, replicas.parse("gateway=2,scheduler=2"))
    replicas.save(settings, plan)
    targets = metrics_targets(settings)
    assert sorted(targets) == ["gateway", "projector", "scheduler", "webhooks"]
    assert targets["gateway"] == [f"{h}:{plan.ports['gateway-1'][1]}", f"{h}:{plan.ports['gateway-2'][1]}"]
    assert targets["scheduler"] == [f"{h}:{scheduler_metrics_port(settings)}", f"{h}:{plan.ports['scheduler-2'][0]}"]
    assert len(targets["projector"]) == len(targets["webhooks"]) == 1


def test_up_replicas_records_a_changed_plan_and_keeps_an_unchanged_one(settings):
    from spotreel.devstack.replicated import apply

    lines: list[str] = []
    plan = apply(settings, "gateway=2,webhooks=2", lines.append)
    assert replicas.load(settings) == plan and lines == [
        f"replicas: gateway=2,scheduler=1,projector=1,webhooks=2 (recorded in {replicas.plan_file(settings)})"]
    assert apply(settings, "webhooks=2,gateway=2", lines.append) == plan and len(lines) == 1  # same counts: no-op
    own = {p for ports in plan.ports.values() for p in ports}
    assert settings.gateway_port not in own and settings.kafka_port not in own
    apply(settings, "", lines.append)
    assert not replicas.plan_file(settings).exists() and lines[-1].startswith("replicas: gateway=1,")
