"""`Ec2Provider`: a pool's workers as EC2 spot instances, launched with EC2 Fleet and found again by tag.

- **Launch**: `create_fleet(Type="instant")` over the operator's launch template (image, instance profile,
  security groups, IMDSv2) with one override per instance type x subnet that is worth asking for now
  (ec2_choice: expected cost per video from the spot price and the interruption rate measured here, minus
  the placements backing off after an error), spot with `price-capacity-optimized`. What spot could not
  launch is asked of on-demand, within the operator's cap. Every instance and the fleet are tagged
  `spotreel:pool`, `spotreel:deployment`, `spotreel:launch` at launch (TagSpecifications, so no instance is
  ever untagged), and boot with ec2_userdata's script (worker id = instance id; no secret in it).
- **Adopt**: the fleet is whatever `describe_instances` finds with this pool's and deployment's tags, so a
  restarted manager takes over what runs, launches nothing twice, and a drain it had begun (a tag on the
  instance) is carried on.
- **Drain, then terminate**: a drain tags the instance `spotreel:drain` and asks the instance through SSM
  Run Command (`AWS-RunShellScript`) to `systemctl stop spotreel-worker`: SIGTERM, the worker checkpoints,
  releases its lease and exits, and the command returns when it has. The instance is terminated once that
  command has ended, or after `drain_timeout_s` whatever it says (an instance without the SSM agent: the OS
  shutdown of the termination sends the same SIGTERM). Before terminating, the instance is tagged
  `spotreel:terminated-by=capacity`, so an ended instance without that tag is an interruption.
- **Errors** (`InsufficientInstanceCapacity`, `MaxSpotInstanceCountExceeded`, `RequestLimitExceeded`, as a
  call's error or one override's in the fleet's `Errors`) put that placement (or, for throttling, every
  placement) into a doubling backoff; the next placement in the ranking is tried in the same call, and
  `add` returns what did start: it never raises, so the manager loop retries on its next tick. Errors are
  counted in `summary()` and in the metrics.
- **Notices**: a spot instance request whose status says the instance is marked for termination or stop
  (EC2's two-minute warning, `describe_spot_instance_requests`) is a preemption notice for the manager; the
  worker on it reads the same warning from its own metadata service.
"""

from __future__ import annotations

import base64
import logging
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from spotreel.services.capacity import ec2_choice as choice
from spotreel.services.capacity.ec2_userdata import WorkerLaunch, render
from spotreel.services.capacity.providers import Worker

log = logging.getLogger("spotreel.capacity.ec2")

TAG_POOL, TAG_DEPLOYMENT, TAG_LAUNCH = "spotreel:pool", "spotreel:deployment", "spotreel:launch"
TAG_DRAIN, TAG_TERMINATED_BY = "spotreel:drain", "spotreel:terminated-by"
LIVE_STATES = ("pending", "running")
ENDED_STATES = ("shutting-down", "terminated", "stopping", "stopped")
NOTICE_CODES = frozenset({"marked-for-termination", "marked-for-stop", "marked-for-hibernation"})
SSM_DONE = frozenset({"Success", "Failed", "Cancelled", "TimedOut", "Undeliverable", "Terminated"})
DRAIN_COMMAND = "systemctl stop spotreel-worker.service"


@dataclass(frozen=True)
class Ec2PoolConfig:
    pool: str
    deployment: str
    launch_template: str  # a name, or an id (lt-...)
    instance_types: tuple[str, ...]
    subnets: tuple[str, ...]
    region: str = "us-east-1"
    endpoint_url: str = ""  # EC2 and SSM endpoint; "" = AWS's own for the region
    on_demand_share: float = 0.0  # at most this share of the fleet on-demand (0: spot only)
    on_demand_max: int = 0  # and at most this many on-demand instances
    video_s: float = 60.0  # GPU seconds of one video, until the pool's mean run time is measured
    redo_s: float = 60.0  # seconds redone per interruption (work since the checkpoint, model load)
    price_tolerance: float = 0.2  # placements within this share of the best cost per video are offered
    backoff_base_s: float = 10.0
    backoff_cap_s: float = 600.0
    drain_timeout_s: float = 150.0
    interruption_prior_per_hour: float = 0.05
    interruption_prior_hours: float = 20.0
    price_refresh_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.instance_types or not self.subnets:
            raise ValueError("--ec2-instance-types and --ec2-subnets need at least one each")
        if not self.launch_template:
            raise ValueError("--ec2-launch-template is required")
        if not 0 <= self.on_demand_share <= 1 or self.on_demand_max < 0:
            raise ValueError("--ec2-on-demand-share must be within [0, 1] and --ec2-on-demand-max >= 0")
        if self.video_s <= 0 or self.redo_s < 0 or self.price_tolerance < 0:
            raise ValueError("--ec2-video-seconds must be positive, --ec2-redo-seconds and "
                             "--ec2-price-tolerance not negative")
        if self.backoff_base_s <= 0 or self.backoff_cap_s < self.backoff_base_s or self.drain_timeout_s <= 0:
            raise ValueError("backoff base must be positive, its cap at least the base, the drain timeout positive")


def ec2_clients(cfg: Ec2PoolConfig) -> tuple[Any, Any]:
    """(ec2, ssm) boto3 clients for the pool's region and endpoint, with boto3's credential chain."""
    import boto3
    from botocore.config import Config

    conf = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20)
    kw: dict[str, Any] = {"region_name": cfg.region, "config": conf}
    if cfg.endpoint_url:
        kw["endpoint_url"] = cfg.endpoint_url
    return boto3.client("ec2", **kw), boto3.client("ssm", **kw)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__))


def _tags(inst: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in inst.get("Tags", [])}


@dataclass
class Ec2Provider:
    cfg: Ec2PoolConfig
    launch: WorkerLaunch
    ec2: Any
    ssm: Any
    clock: Callable[[], float] = time.time
    jitter: Callable[[], float] = random.random
    metrics: Any = None  # CapacityMetrics, for launch errors and cost per video
    # What the provider has learnt; none of it is needed to adopt a fleet (that is in the tags).
    seen: dict[str, choice.Seen] = field(default_factory=dict)
    # per lifecycle (spot, on-demand): spot capacity gone from a placement says nothing of on-demand there
    backoffs: dict[str, dict[choice.Placement, choice.Backoff]] = field(
        default_factory=lambda: {"spot": {}, "on-demand": {}})
    call_backoff: choice.Backoff | None = None
    errors: Counter = field(default_factory=Counter)
    last_error: dict | None = None
    launched: Counter = field(default_factory=Counter)  # by lifecycle: spot, on-demand
    terminated: int = 0
    adopted: int = -1  # instances found running at the first look (-1: not looked yet)
    launches: list[str] = field(default_factory=list)
    mean_run_s: float = 0.0  # the pool's measured mean run time, when the caller has one
    _zones: dict[str, str] = field(default_factory=dict)
    _prices: dict[tuple[str, str], float] = field(default_factory=dict)
    _prices_at: float | None = None
    _live: dict[str, dict] = field(default_factory=dict)
    _ending: set[str] = field(default_factory=set)  # terminated by us, in this process
    _noticed: set[str] = field(default_factory=set)

    # --- what runs -------------------------------------------------------------------------------
    def _describe(self) -> list[dict]:
        filters = [{"Name": f"tag:{TAG_POOL}", "Values": [self.cfg.pool]},
                   {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [self.cfg.deployment]},
                   {"Name": "instance-state-name", "Values": [*LIVE_STATES, *ENDED_STATES]}]
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for res in page.get("Reservations", []):
                out.extend(res.get("Instances", []))
        return out

    def _record(self, inst: dict, now: float) -> None:
        iid, state = inst["InstanceId"], inst["State"]["Name"]
        launched = inst["LaunchTime"].timestamp() if hasattr(inst.get("LaunchTime"), "timestamp") else now
        zone = inst.get("Placement", {}).get("AvailabilityZone", "")
        before = self.seen.get(iid)
        if before is None:
            before = choice.Seen(inst.get("InstanceType", ""), zone, launched)
        if state in ENDED_STATES and before.ended_s is None:
            ours = iid in self._ending or TAG_TERMINATED_BY in _tags(inst)
            before = choice.Seen(before.instance_type, before.zone, before.launched_s, now,
                                 interrupted=before.interrupted or not ours)
            if not ours:
                log.warning("instance %s (%s in %s) ended without the manager asking: counted as an interruption",
                            iid, before.instance_type, before.zone)
        self.seen[iid] = before

    def workers(self) -> list[Worker]:
        now = self.clock()
        instances = self._describe()
        for inst in instances:
            self._record(inst, now)
        live = [i for i in instances if i["State"]["Name"] in LIVE_STATES]
        if self.adopted < 0:
            self.adopted = len(live)
        self._live = {i["InstanceId"]: i for i in live}
        out = []
        for inst in live:
            iid, tags = inst["InstanceId"], _tags(inst)
            if TAG_DRAIN in tags and iid not in self._ending and self._drained(iid, tags[TAG_DRAIN], now):
                self._terminate([iid])
            started = inst["LaunchTime"].timestamp() if hasattr(inst.get("LaunchTime"), "timestamp") else now
            out.append(Worker(iid, TAG_DRAIN in tags or iid in self._ending, started))
        return out

    # --- launch ----------------------------------------------------------------------------------
    def _zone_of(self) -> dict[str, str]:
        if not self._zones:
            answer = self.ec2.describe_subnets(SubnetIds=list(self.cfg.subnets))
            self._zones = {s["SubnetId"]: s["AvailabilityZone"] for s in answer["Subnets"]}
        return self._zones

    def placements(self) -> list[choice.Placement]:
        zones = self._zone_of()
        return [choice.Placement(t, s, zones.get(s, "")) for t in self.cfg.instance_types for s in self.cfg.subnets]

    def _refresh_prices(self, now: float) -> None:
        if self._prices_at is not None and now - self._prices_at < self.cfg.price_refresh_s:
            return
        zones = sorted(set(self._zone_of().values()))
        history: list[dict] = []
        for page in self.ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=list(self.cfg.instance_types), ProductDescriptions=["Linux/UNIX"],
                Filters=[{"Name": "availability-zone", "Values": zones}], StartTime=now - 3600 * 6):
            history.extend(page.get("SpotPriceHistory", []))
        self._prices, self._prices_at = choice.latest_prices(history), now

    def quotes(self, now: float | None = None) -> list[choice.Quote]:
        now = self.clock() if now is None else now
        rates = choice.interruption_rates(self.seen.values(), now, self.cfg.interruption_prior_per_hour,
                                          self.cfg.interruption_prior_hours)
        video_s = self.mean_run_s or self.cfg.video_s
        return choice.quote(self.placements(), self._prices, rates, self.cfg.interruption_prior_per_hour,
                            video_s, self.cfg.redo_s)

    def add(self, n: int) -> list[str]:
        now = self.clock()
        if n <= 0 or (self.call_backoff is not None and self.call_backoff.until_s > now):
            return []
        try:
            self._refresh_prices(now)
            quotes = self.quotes(now)
        except Exception as exc:  # noqa: BLE001 - a failed price read must not stop the fleet: backoff, retry
            self._failed(None, "spot", _error_code(exc), str(exc), now)
            return []
        self._publish(quotes)
        started = self._fleet(n, "spot", now)
        shortfall = n - len(started)
        on_demand = sum(1 for i in self._live.values() if i.get("InstanceLifecycle") != "spot")
        allowed = choice.on_demand_allowance(shortfall, len(self._live) + n, on_demand,
                                             self.cfg.on_demand_share, self.cfg.on_demand_max)
        if allowed:
            started += self._fleet(allowed, "on-demand", now)
        return started

    def _fleet(self, n: int, lifecycle: str, now: float) -> list[str]:
        offered = choice.within(choice.rank(self.quotes(now), self.backoffs[lifecycle], now),
                                self.cfg.price_tolerance)
        if not offered or (self.call_backoff is not None and self.call_backoff.until_s > now):
            return []
        launch_id = uuid.uuid4().hex[:12]
        tags = [{"Key": TAG_POOL, "Value": self.cfg.pool}, {"Key": TAG_DEPLOYMENT, "Value": self.cfg.deployment},
                {"Key": TAG_LAUNCH, "Value": launch_id},
                {"Key": "Name", "Value": f"spotreel-{self.cfg.deployment}-{self.cfg.pool}"}]
        lt = self.cfg.launch_template
        spec = {"LaunchTemplateId" if lt.startswith("lt-") else "LaunchTemplateName": lt, "Version": "$Default",
                "LaunchTemplateSpecificationUserData": base64.b64encode(render(self.launch).encode()).decode()}
        overrides = [{"InstanceType": q.placement.instance_type, "SubnetId": q.placement.subnet_id} for q in offered]
        request: dict[str, Any] = {
            "ClientToken": launch_id, "Type": "instant",
            "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": spec, "Overrides": overrides}],
            "TargetCapacitySpecification": {"TotalTargetCapacity": n, "DefaultTargetCapacityType": lifecycle},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "fleet", "Tags": tags}]}
        if lifecycle == "spot":
            request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        try:
            answer = self.ec2.create_fleet(**request)
        except Exception as exc:  # noqa: BLE001 - any refusal of the call is a backoff, never a crash
            code = _error_code(exc)
            wide = code in choice.CALL_WIDE_ERRORS
            self._failed(None if wide else [q.placement for q in offered], lifecycle, code, str(exc), now)
            return []
        self.launches.append(launch_id)
        by_override = {(q.placement.instance_type, q.placement.subnet_id): q.placement for q in offered}
        for err in answer.get("Errors", []):
            o = err.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
            placement = by_override.get((o.get("InstanceType"), o.get("SubnetId")))
            code = err.get("ErrorCode", "Unknown")
            wide = code in choice.CALL_WIDE_ERRORS or placement is None
            self._failed(None if wide else [placement], lifecycle, code, err.get("ErrorMessage", ""), now)
        started = [iid for group in answer.get("Instances", []) for iid in group.get("InstanceIds", [])]
        for group in answer.get("Instances", []):
            o = group.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
            placement = by_override.get((o.get("InstanceType"), o.get("SubnetId")))
            if placement is not None:
                self.backoffs[lifecycle].pop(placement, None)  # it launched: its error streak is over
        if started:
            self.call_backoff = None
        self.launched[lifecycle] += len(started)
        return started

    def _failed(self, placements: list[choice.Placement] | None, lifecycle: str, code: str, message: str,
                now: float) -> None:
        """Back off these placements (None: the whole call, every placement) and count the error once."""
        if placements is None:
            self.call_backoff = choice.after_error(self.call_backoff, code, now, self.cfg.backoff_base_s,
                                                   self.cfg.backoff_cap_s, self.jitter())
            until, where = self.call_backoff.until_s, "all"
        else:
            mine = self.backoffs[lifecycle]
            for placement in placements:
                mine[placement] = choice.after_error(mine.get(placement), code, now, self.cfg.backoff_base_s,
                                                     self.cfg.backoff_cap_s, self.jitter())
            until = max(mine[pl].until_s for pl in placements)
            where = ",".join(f"{pl.instance_type}/{pl.subnet_id}" for pl in placements)
        self.errors[code] += 1
        self.last_error = {"code": code, "lifecycle": lifecycle, "where": where, "at": now,
                           "retry_in_s": round(until - now, 1), "message": message[:200]}
        log.warning("ec2 %s launch error %s on %s: retrying in %.0f s", lifecycle, code, where, until - now)
        if self.metrics is not None:
            self.metrics.launch_errors.labels(self.cfg.pool, code).inc()

    def _publish(self, quotes: list[choice.Quote]) -> None:
        if self.metrics is None:
            return
        for q in quotes:
            if q.cost_per_video is not None:
                self.metrics.cost_per_video.labels(self.cfg.pool, q.placement.instance_type,
                                                   q.placement.zone).set(q.cost_per_video)

    def observe_pool(self, view: Any) -> None:
        """The pool's statistics of this tick: its measured mean run time prices a video."""
        if view.mean_run_ms > 0:
            self.mean_run_s = view.mean_run_ms / 1000.0

    # --- drain and terminate ---------------------------------------------------------------------
    def drain(self, worker_id: str) -> None:
        inst = self._live.get(worker_id)
        if worker_id in self._ending or (inst is not None and TAG_DRAIN in _tags(inst)):
            return
        now = self.clock()
        command_id = ""
        try:
            answer = self.ssm.send_command(InstanceIds=[worker_id], DocumentName="AWS-RunShellScript",
                                           Comment=f"spotreel drain {self.cfg.pool}",
                                           TimeoutSeconds=max(30, int(self.cfg.drain_timeout_s)),
                                           Parameters={"commands": [DRAIN_COMMAND]})
            command_id = answer["Command"]["CommandId"]
        except Exception as exc:  # noqa: BLE001 - no SSM: the termination's OS shutdown sends the same SIGTERM
            log.warning("drain of %s through SSM failed (%s): terminating it after the drain timeout",
                        worker_id, _error_code(exc))
        try:
            self.ec2.create_tags(Resources=[worker_id], Tags=[{"Key": TAG_DRAIN, "Value": f"{now:.0f}:{command_id}"}])
        except Exception as exc:  # noqa: BLE001 - gone already, or throttled: the next tick sees which
            log.warning("could not tag %s as draining: %s", worker_id, _error_code(exc))
        if inst is not None:
            inst.setdefault("Tags", []).append({"Key": TAG_DRAIN, "Value": f"{now:.0f}:{command_id}"})

    def _drained(self, worker_id: str, tag: str, now: float) -> bool:
        since, _, command_id = tag.partition(":")
        try:
            if now - float(since) >= self.cfg.drain_timeout_s:
                return True
        except ValueError:
            return True
        if not command_id:
            return False
        try:
            got = self.ssm.get_command_invocation(CommandId=command_id, InstanceId=worker_id)
        except Exception:  # noqa: BLE001 - not delivered yet (InvocationDoesNotExist) or a blip: ask next tick
            return False
        return got.get("Status") in SSM_DONE

    def _terminate(self, ids: list[str]) -> None:
        try:
            self.ec2.create_tags(Resources=ids, Tags=[{"Key": TAG_TERMINATED_BY, "Value": "capacity"}])
            self.ec2.terminate_instances(InstanceIds=ids)
        except Exception as exc:  # noqa: BLE001 - retried on the next tick: the drain tag is still there
            log.warning("terminating %s failed: %s", ids, _error_code(exc))
            return
        self._ending.update(ids)
        self.terminated += len(ids)

    # --- notices, summary, close -----------------------------------------------------------------
    def notices(self) -> list[str]:
        spot = [iid for iid, i in self._live.items() if i.get("InstanceLifecycle") == "spot"
                and iid not in self._noticed]
        if not spot:
            return []
        try:
            answer = self.ec2.describe_spot_instance_requests(Filters=[{"Name": "instance-id", "Values": spot}])
        except Exception as exc:  # noqa: BLE001 - the workers read their own notice; this one is a head start
            log.warning("describe_spot_instance_requests failed: %s", _error_code(exc))
            return []
        out = []
        for req in answer.get("SpotInstanceRequests", []):
            iid = req.get("InstanceId")
            if iid in spot and req.get("Status", {}).get("Code") in NOTICE_CODES:
                self._noticed.add(iid)
                prior = self.seen.get(iid)
                if prior is not None:
                    self.seen[iid] = choice.Seen(prior.instance_type, prior.zone, prior.launched_s, prior.ended_s,
                                                 interrupted=True)
                out.append(iid)
        return out

    def summary(self) -> dict:
        now = self.clock()
        try:
            if self._prices_at is None:
                self._refresh_prices(now)
            quotes = self.quotes(now)
        except Exception as exc:  # noqa: BLE001 - the summary is for people; EC2 unreachable is not a crash
            log.warning("no placement figures for the summary: %s", _error_code(exc))
            quotes = []
        return {
            "instances_live": len(self._live), "adopted": max(0, self.adopted), "launched": dict(self.launched),
            "terminated": self.terminated, "launches": len(self.launches),
            "interrupted": sum(s.interrupted for s in self.seen.values()),
            "errors": dict(self.errors), "last_error": self.last_error,
            "backing_off": sorted(f"{kind}:{p.instance_type}/{p.subnet_id}" for kind, offs in self.backoffs.items()
                                  for p, b in offs.items() if b.until_s > now)
            + (["all"] if self.call_backoff is not None and self.call_backoff.until_s > now else []),
            "placements": [{"instance_type": q.placement.instance_type, "subnet": q.placement.subnet_id,
                            "zone": q.placement.zone, "spot_price": q.spot_price,
                            "interruptions_per_hour": round(q.interruptions_per_hour, 4),
                            "cost_per_video": None if q.cost_per_video is None else float(f"{q.cost_per_video:.4g}")}
                           for q in quotes]}

    def close(self, timeout: float = 30.0) -> None:
        """Leave the fleet as it is: instances are found again by tag when the manager starts next, and a
        stop of the manager is no reason to stop rendering. Scaling to zero is `--ceiling 0`."""
