"""Where the EC2 provider launches, as pure functions of prices, measured interruptions and past errors.

No clock and no I/O: the provider passes in the spot prices it read (`describe_spot_price_history`), the
instances it has seen (to measure interruptions per instance type and zone), the errors EC2 answered and
`now_s`. The rules:

- an interruption rate is the losses the cloud caused on a (type, zone) per instance-hour run there, pulled
  toward a prior while few hours are observed, so one early loss does not condemn a zone;
- the expected cost of one video on a placement is its spot price times the GPU time of one video plus,
  for each interruption expected during it, the work redone after the resume;
- placements are ranked by that cost (unknown prices last), then by interruption rate, then by the order
  the operator listed them; a placement that answered a capacity, limit or throttling error sits out a
  backoff that doubles with each consecutive error, up to a cap;
- on-demand instances fill in only for what spot could not launch, within the operator's cap (a share of
  the fleet and a count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

# Errors that mean "not here, not now": another type or subnet may work, this one after a backoff.
RETRYABLE_ERRORS = frozenset({"InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded",
                              "RequestLimitExceeded", "SpotMaxPriceTooLow", "InsufficientCapacity",
                              "Unsupported", "InstanceLimitExceeded", "VcpuLimitExceeded"})
# Errors that concern the whole call, not one placement: every placement waits.
CALL_WIDE_ERRORS = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})


@dataclass(frozen=True)
class Placement:
    instance_type: str
    subnet_id: str
    zone: str

    @property
    def pool_key(self) -> tuple[str, str]:
        """EC2's spot capacity pool: the instance type in an availability zone."""
        return (self.instance_type, self.zone)


@dataclass(frozen=True)
class Seen:
    """One instance the provider has known: where it ran, when, and whether the cloud took it away."""

    instance_type: str
    zone: str
    launched_s: float
    ended_s: float | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class Quote:
    placement: Placement
    spot_price: float | None  # $/hour, None when EC2 gave no price for the pool
    interruptions_per_hour: float
    cost_per_video: float | None  # $, None when the price is unknown


@dataclass(frozen=True)
class Backoff:
    failures: int  # consecutive errors
    until_s: float
    last_error: str


def interruption_rates(seen: Iterable[Seen], now_s: float, prior_per_hour: float, prior_hours: float
                       ) -> dict[tuple[str, str], float]:
    """Interruptions per instance-hour per (type, zone): (losses + prior_rate * prior_hours) over
    (hours run + prior_hours). Only pools with at least one instance seen get an entry."""
    losses: dict[tuple[str, str], int] = {}
    hours: dict[tuple[str, str], float] = {}
    for s in seen:
        key = (s.instance_type, s.zone)
        end = s.ended_s if s.ended_s is not None else now_s
        hours[key] = hours.get(key, 0.0) + max(0.0, end - s.launched_s) / 3600.0
        losses[key] = losses.get(key, 0) + (1 if s.interrupted else 0)
    return {k: (losses[k] + prior_per_hour * prior_hours) / (hours[k] + prior_hours) if hours[k] + prior_hours > 0
            else prior_per_hour for k in hours}


def cost_per_video(price_per_hour: float, video_s: float, interruptions_per_hour: float, redo_s: float) -> float:
    """Expected dollars for one video: its GPU seconds plus, per interruption expected while it renders, the
    seconds redone after the resume (the work since the last checkpoint, the new worker's model load)."""
    expected_interruptions = max(0.0, interruptions_per_hour) * video_s / 3600.0
    return price_per_hour * (video_s + expected_interruptions * redo_s) / 3600.0


def latest_prices(history: Iterable[Mapping]) -> dict[tuple[str, str], float]:
    """The newest price per (type, zone) of a `describe_spot_price_history` answer."""
    newest: dict[tuple[str, str], tuple[str, float]] = {}
    for h in history:
        key = (h["InstanceType"], h["AvailabilityZone"])
        stamp = str(h.get("Timestamp", ""))
        if key not in newest or stamp >= newest[key][0]:
            newest[key] = (stamp, float(h["SpotPrice"]))
    return {k: v for k, (_, v) in newest.items()}


def quote(placements: Iterable[Placement], prices: Mapping[tuple[str, str], float],
          rates: Mapping[tuple[str, str], float], prior_per_hour: float, video_s: float, redo_s: float
          ) -> list[Quote]:
    """Each placement's figures (a pool without a measured rate gets the prior)."""
    out = []
    for p in placements:
        price = prices.get(p.pool_key)
        rate = rates.get(p.pool_key, prior_per_hour)
        out.append(Quote(p, price, rate, None if price is None else cost_per_video(price, video_s, rate, redo_s)))
    return out


def rank(quotes: list[Quote], backoffs: Mapping[Placement, Backoff], now_s: float) -> list[Quote]:
    """The placements to ask for, best first: those not backing off, by expected cost per video (unknown
    prices last), then interruption rate, then the operator's order."""
    order = {q.placement: i for i, q in enumerate(quotes)}
    free = [q for q in quotes if not (q.placement in backoffs and backoffs[q.placement].until_s > now_s)]
    return sorted(free, key=lambda q: (q.cost_per_video is None, q.cost_per_video or 0.0,
                                       q.interruptions_per_hour, order[q.placement]))


def within(ranked: list[Quote], tolerance: float) -> list[Quote]:
    """The ranked placements whose cost per video is within `tolerance` (0.2 = 20 %) of the best one's: the
    set EC2 Fleet may choose from by capacity. Placements without a price come only when none has one."""
    priced = [q for q in ranked if q.cost_per_video is not None]
    if not priced:
        return list(ranked)
    best = priced[0].cost_per_video or 0.0
    return [q for q in priced if (q.cost_per_video or 0.0) <= best * (1.0 + tolerance) + 1e-12]


def backoff_s(failures: int, base_s: float, cap_s: float, jitter: float) -> float:
    """Seconds to wait after `failures` consecutive errors: base doubling per failure up to the cap, scaled
    into [0.5, 1] of that by `jitter` in [0, 1] so many managers do not retry in step."""
    if failures <= 0:
        return 0.0
    raw = min(cap_s, base_s * math.pow(2.0, min(failures - 1, 60)))
    return raw * (0.5 + 0.5 * min(1.0, max(0.0, jitter)))


def after_error(previous: Backoff | None, code: str, now_s: float, base_s: float, cap_s: float,
                jitter: float) -> Backoff:
    failures = (previous.failures if previous is not None else 0) + 1
    return Backoff(failures, now_s + backoff_s(failures, base_s, cap_s, jitter), code)


def on_demand_allowance(shortfall: int, fleet_wanted: int, on_demand_running: int, share: float,
                        max_count: int) -> int:
    """On-demand instances that may fill `shortfall`: at most `max_count` on-demand in all, and at most
    `share` of the fleet being asked for (what runs plus this request). 0 when either cap is 0."""
    if shortfall <= 0 or share <= 0 or max_count <= 0:
        return 0
    by_share = math.floor(share * fleet_wanted + 1e-9) - on_demand_running
    return max(0, min(shortfall, max_count - on_demand_running, by_share))
