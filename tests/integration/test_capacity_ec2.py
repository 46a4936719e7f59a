"""The EC2 provider against a real moto server (EC2 and SSM APIs, devstack/moto.py): fleets launched with
tags and user data, adoption by a restarted provider, drain before terminate, the error paths with
backoff, and the choice of a placement from moto's spot price history and the interruptions measured.

moto answers every `describe_spot_price_history` record with the same price (0.00001), so the price part
of the choice is a tie here and the measured interruption rate decides; moto never answers a fleet with
per-override `Errors` nor refuses a call for capacity, so those answers are injected with botocore event
hooks on the provider's client, only into the calls named, while the request itself still goes to moto
(a refused call returns before it)."""

from __future__ import annotations

import base64
from typing import Any, Iterator

import pytest

from spotreel.services.capacity.ec2_userdata import WorkerLaunch, read
from spotreel.services.capacity.metrics import CapacityMetrics
from spotreel.services.capacity.provider_ec2 import (DRAIN_COMMAND, TAG_DRAIN, TAG_TERMINATED_BY, Ec2PoolConfig,
                                                     Ec2Provider)
from spotreel.devstack.moto import MotoServer
from tests.integration.motokit import TEMPLATE, Account, fresh_account, instances, running_moto, tags

POOL = "tiny-t2v@any"
LAUNCH = WorkerLaunch(POOL, env=(("SPOTREEL_WORKER_GATEWAY_URL", "http://10.0.0.5:18700"),
                                 ("SPOTREEL_CLOUD_NOTICES", "aws")),
                      secrets=(("SPOTREEL_WORKER_KEY", "/spotreel/t/worker-key"),))


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    yield from running_moto(tmp_path_factory.mktemp("moto"))


@pytest.fixture
def account(moto: MotoServer) -> Account:
    return fresh_account(moto)


def provider(account: Account, clock: Any = None, **kw: Any) -> Ec2Provider:
    cfg = Ec2PoolConfig(pool=POOL, deployment="t", launch_template=TEMPLATE,
                        instance_types=kw.pop("types", ("g6.xlarge", "g5.xlarge")),
                        subnets=tuple(account.subnets.values()), endpoint_url=account.endpoint, **kw)
    extra = {"clock": clock} if clock is not None else {}
    return Ec2Provider(cfg, LAUNCH, account.moto.client("ec2"), account.moto.client("ssm"),
                       metrics=CapacityMetrics(), jitter=lambda: 1.0, **extra)


def test_a_fleet_launches_tagged_spot_instances_that_boot_the_worker_without_secrets(account):
    p = provider(account)
    assert p.workers() == []
    started = p.add(3)
    assert len(started) == 3
    live = {i["InstanceId"]: i for i in instances(account.ec2, "pending", "running")}
    assert set(live) == set(started)
    launch_ids = set()
    for iid in started:
        t = tags(live[iid])
        assert (t["spotreel:pool"], t["spotreel:deployment"]) == (POOL, "t")
        launch_ids.add(t["spotreel:launch"])
        assert live[iid]["InstanceLifecycle"] == "spot"
        raw = account.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
        text = base64.b64decode(raw).decode()
        plan = read(text)
        assert plan.argv[:4] == ["spotreel", "worker", "--pool", POOL]
        assert plan.env["SPOTREEL_CLOUD_NOTICES"] == "aws"
        assert plan.secrets == {"SPOTREEL_WORKER_KEY": "/spotreel/t/worker-key"}
        assert "sr_" not in text  # no worker key, only the parameter's name
    assert len(launch_ids) == 1 and p.launches == list(launch_ids)
    assert sorted(w.worker_id for w in p.workers()) == sorted(started)
    fleets = account.ec2.describe_fleets()["Fleets"]
    assert [f["Type"] for f in fleets] == ["instant"]
    assert fleets[0]["SpotOptions"]["AllocationStrategy"] == "price-capacity-optimized"
    assert p.summary()["launched"] == {"spot": 3}


def test_a_restarted_provider_adopts_the_fleet_and_launches_nothing_twice(account):
    first = provider(account)
    started = first.add(2)
    again = provider(account)  # a new manager process: nothing in memory
    assert sorted(w.worker_id for w in again.workers()) == sorted(started)
    s = again.summary()
    assert (s["adopted"], s["launched"], s["launches"]) == (2, {}, 0)
    # other pools' and deployments' instances are not ours
    other = Ec2Provider(Ec2PoolConfig(pool="wan@h100", deployment="t", launch_template=TEMPLATE,
                                      instance_types=("g6.xlarge",), subnets=tuple(account.subnets.values())),
                        LAUNCH, account.moto.client("ec2"), account.moto.client("ssm"))
    assert other.workers() == []
    assert len(instances(account.ec2, "pending", "running")) == 2


def test_scale_in_drains_through_ssm_and_terminates_only_once_the_drain_ended(account):
    clock = Clock(1_000_000.0)
    p = provider(account, clock, drain_timeout_s=60.0)
    a, b = p.add(2)
    p.workers()
    p.drain(a)
    inst = {i["InstanceId"]: i for i in instances(account.ec2)}
    assert inst[a]["State"]["Name"] == "running" and TAG_DRAIN in tags(inst[a])
    commands = account.ssm.list_commands(InstanceId=a)["Commands"]
    assert [c["Parameters"]["commands"] for c in commands] == [[DRAIN_COMMAND]]
    # The command has ended (moto reports it done at once): this look terminates the instance, still
    # draining in what it returns, and the next look no longer has it.
    assert [w.draining for w in p.workers() if w.worker_id == a] == [True]
    assert [w.worker_id for w in p.workers()] == [b]
    inst = {i["InstanceId"]: i for i in instances(account.ec2)}
    assert inst[a]["State"]["Name"] == "terminated" and tags(inst[a])[TAG_TERMINATED_BY] == "capacity"
    assert inst[b]["State"]["Name"] == "running"
    # A drain whose command never reached the instance (no SSM agent) waits for the drain timeout, and a
    # restarted provider carries it on from the tag.
    account.ec2.create_tags(Resources=[b], Tags=[{"Key": TAG_DRAIN, "Value": f"{clock.t:.0f}:"}])
    later = provider(account, clock, drain_timeout_s=60.0)
    clock.t += 30
    assert [(w.worker_id, w.draining) for w in later.workers()] == [(b, True)]
    clock.t += 31
    later.workers()
    assert later.workers() == []
    assert {i["InstanceId"]: i["State"]["Name"] for i in instances(account.ec2)} == {a: "terminated", b: "terminated"}
    assert p.summary()["interrupted"] == 0 and later.summary()["interrupted"] == 0


def _inject(p: Ec2Provider, handler_name: str, handler: Any) -> None:
    p.ec2.meta.events.register(handler_name, handler)


class _Http:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict = {}
        self.content = b""
        self.raw = None


def test_capacity_errors_back_the_placement_off_and_the_next_one_launches(account):
    clock = Clock(2_000_000.0)
    p = provider(account, clock, backoff_base_s=10.0)
    subnet_a = account.subnets["us-east-1a"]

    def drop_first(params: dict, **_: Any) -> None:  # EC2 found no g6.xlarge capacity in zone a
        cfg = params["LaunchTemplateConfigs"][0]
        cfg["Overrides"] = [o for o in cfg["Overrides"]
                            if (o["InstanceType"], o["SubnetId"]) != ("g6.xlarge", subnet_a)]

    def report(parsed: dict, **_: Any) -> None:
        parsed.setdefault("Errors", []).append({
            "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "g6.xlarge", "SubnetId": subnet_a}},
            "Lifecycle": "spot", "ErrorCode": "InsufficientInstanceCapacity",
            "ErrorMessage": "There is no Spot capacity available that matches your request."})

    _inject(p, "provide-client-params.ec2.CreateFleet", drop_first)
    _inject(p, "after-call.ec2.CreateFleet", report)
    started = p.add(1)
    assert len(started) == 1
    got = {i["InstanceId"]: i for i in instances(account.ec2)}[started[0]]
    assert (got["InstanceType"], got["SubnetId"]) != ("g6.xlarge", subnet_a)
    s = p.summary()
    assert s["errors"] == {"InsufficientInstanceCapacity": 1}
    assert s["backing_off"] == [f"spot:g6.xlarge/{subnet_a}"] and s["last_error"]["retry_in_s"] == 10.0
    assert p.metrics.launch_errors.labels(POOL, "InsufficientInstanceCapacity")._value.get() == 1
    p.ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", drop_first)
    p.ec2.meta.events.unregister("after-call.ec2.CreateFleet", report)
    # While it backs off, the placement is not offered; after the backoff it is again.
    offered: list[list[tuple[str, str]]] = []

    def record(params: dict, **_: Any) -> None:
        offered.append([(o["InstanceType"], o["SubnetId"]) for o in params["LaunchTemplateConfigs"][0]["Overrides"]])

    _inject(p, "provide-client-params.ec2.CreateFleet", record)
    p.add(1)
    clock.t += 10
    p.add(1)
    assert ("g6.xlarge", subnet_a) not in offered[0] and offered[1][0] == ("g6.xlarge", subnet_a)
    assert p.summary()["backing_off"] == []


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "MaxSpotInstanceCountExceeded"])
def test_a_refused_call_is_backed_off_never_raised_and_on_demand_fills_within_its_cap(account, code):
    clock = Clock(3_000_000.0)
    p = provider(account, clock, backoff_base_s=10.0, on_demand_share=0.5, on_demand_max=1)
    calls: list[str] = []

    def note(params: dict, **_: Any) -> None:
        calls.append(params["TargetCapacitySpecification"]["DefaultTargetCapacityType"])

    def refuse_spot(**_: Any) -> Any:  # before-call sees the serialized request: the kind comes from note
        if calls[-1] == "spot":
            return _Http(503 if code == "RequestLimitExceeded" else 400), {
                "Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return None

    _inject(p, "provide-client-params.ec2.CreateFleet", note)
    _inject(p, "before-call.ec2.CreateFleet", refuse_spot)
    started = p.add(2)
    s = p.summary()
    assert s["errors"] == {code: 1}
    if code == "RequestLimitExceeded":  # throttled: every placement waits, on-demand too
        assert started == [] and s["backing_off"] == ["all"] and calls == ["spot"]
        p.add(2)
        assert calls == ["spot"]  # inside the backoff nothing is asked
        clock.t += 10
    else:  # spot refused on every placement: on-demand fills one (the share of 2 is 1, the count 1)
        assert len(started) == 1 and calls == ["spot", "on-demand"]
        assert instances(account.ec2)[0].get("InstanceLifecycle") is None
        assert len(s["backing_off"]) == 4
        clock.t += 10
    p.ec2.meta.events.unregister("before-call.ec2.CreateFleet", refuse_spot)
    assert len(p.add(1)) == 1
    assert p.summary()["backing_off"] == []


def test_the_choice_follows_moto_price_history_and_the_interruptions_measured(account):
    clock = Clock(4_000_000.0)
    p = provider(account, clock, types=("g6.xlarge", "g5.xlarge"), price_tolerance=0.0)
    first = p.add(1)
    q = {(x["instance_type"], x["zone"]): x for x in p.summary()["placements"]}
    assert {x["spot_price"] for x in q.values()} == {0.00001}  # moto's history: one price for all
    got = {i["InstanceId"]: i for i in instances(account.ec2)}[first[0]]
    assert (got["InstanceType"], got["Placement"]["AvailabilityZone"]) == ("g6.xlarge", "us-east-1a")
    # EC2 takes that instance away (not the manager): an interruption of g6.xlarge in us-east-1a.
    p.workers()
    clock.t += 600
    account.ec2.terminate_instances(InstanceIds=first)
    assert p.workers() == []
    s = p.summary()
    assert s["interrupted"] == 1
    rates = {(x["instance_type"], x["zone"]): x["interruptions_per_hour"] for x in s["placements"]}
    assert rates[("g6.xlarge", "us-east-1a")] > rates[("g6.xlarge", "us-east-1b")] == rates[("g5.xlarge", "us-east-1a")]
    second = p.add(1)
    got = {i["InstanceId"]: i for i in instances(account.ec2)}[second[0]]
    assert (got["InstanceType"], got["Placement"]["AvailabilityZone"]) != ("g6.xlarge", "us-east-1a")
    costs = {(x["instance_type"], x["zone"]): x["cost_per_video"] for x in p.summary()["placements"]}
    assert costs[("g6.xlarge", "us-east-1a")] > costs[("g5.xlarge", "us-east-1a")] > 0
    assert p.metrics.cost_per_video.labels(POOL, "g5.xlarge", "us-east-1a")._value.get() > 0
