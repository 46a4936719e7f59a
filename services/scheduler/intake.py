"""Leases judged by when their holders sent their renewals, not by when a gateway behind got them into the log.

A worker on HTTP reaches the log through a gateway. A gateway short of CPU, frozen or queueing requests
delays renewals that the worker sent in time; judged at their append time they would come too late, and the
live holder would lose its lease (docs/decisions/0002-leases-judged-at-send-time.md). Two headers on the
commands the gateway produces (spotreel.dispatch.intake) and its pulses close that gap, per partition:

- Whether a lease command that came through a gateway was in time is judged at the worker's send time, or
  at what the gateway had vouched for when it produced the command if that is earlier (a holder whose
  previous request was stuck in a frozen gateway could send nothing meanwhile: its lease lives while its
  expiry is held, and a renewal it sends then is in time), never earlier than its append time less
  `hold_ms` (a clock far behind gains nothing more), never later than its append time; a renewal still
  counts from its append time (`decide`'s `sent_ms`), so a holder whose renewal waited in a gateway gets a
  full TTL from when it got through.
- The expiry of a lease whose holder's last command came through a gateway waits until that gateway has
  vouched (GatewayPulse.vouched_ms) past the deadline: every renewal it took in before then is in the log
  ahead of the pulse, and is read first. A gateway that is frozen, starved or dead stops vouching; the
  hold ends `hold_ms` after the deadline whatever it says (a vanished worker behind a dead gateway, or a
  grant a dead gateway never delivered, is expired at most that much late), and at once when it says it
  leaves. The gateway a worker asked for work through counts too: a grant made just before its gateway
  froze is delivered when it thaws, not expired in between.

Workers on the Kafka transport have no gateway in between: their leases are judged as before (at the
append time, with the log horizon of timers.py). A gateway that never pulsed holds nothing. What the
gateway cannot see (requests not read from its sockets yet) it covers by vouching no later than now less
its event loop's lag: a proxy, not a proof. State is in memory only: a new owner gives every held lease a
full TTL anyway (rebuild.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from spotreel.domain.commands import GatewayPulse

FORGET_AFTER = 10  # a gateway not heard for this many holds is forgotten (its workers came through another)


@dataclass
class GatewaySeen:
    vouched_ms: int
    heard_ms: int  # the owner's clock when its last pulse was read


@dataclass
class GatewayIntake:
    hold_ms: int = 30_000
    gateways: dict[str, GatewaySeen] = field(default_factory=dict)
    via: dict[str, str] = field(default_factory=dict)  # worker -> the gateway its last command came through

    def pulse(self, pulse: GatewayPulse, now_ms: int) -> None:
        if pulse.leaving:
            self.gateways.pop(pulse.gateway_id, None)
            return
        seen = self.gateways.get(pulse.gateway_id)
        vouched = pulse.vouched_ms if seen is None else max(seen.vouched_ms, pulse.vouched_ms)
        self.gateways[pulse.gateway_id] = GatewaySeen(vouched, now_ms)
        if len(self.gateways) > 1 and any(now_ms - g.heard_ms > FORGET_AFTER * self.hold_ms
                                          for g in self.gateways.values()):
            gone = {k for k, g in self.gateways.items() if now_ms - g.heard_ms > FORGET_AFTER * self.hold_ms}
            self.gateways = {k: g for k, g in self.gateways.items() if k not in gone}
            self.via = {w: g for w, g in self.via.items() if g not in gone}

    def came(self, worker_id: str, gateway_id: str | None) -> None:
        """A command of `worker_id` was read; `gateway_id` None: straight from the worker (Kafka transport)."""
        if gateway_id is None:
            self.via.pop(worker_id, None)
        else:
            self.via[worker_id] = gateway_id

    def judged_ms(self, appended_ms: int | None, sent_ms: int | None, gateway: str | None = None) -> int | None:
        """The time the expiry of a lease command that came through `gateway` is judged at (the module's text):
        its send time, or, if earlier, what that gateway had vouched for when it produced it (its pulses and
        commands share a producer, so the last pulse read is the last it sent before this command)."""
        if appended_ms is None or sent_ms is None:
            return appended_ms
        seen = self.gateways.get(gateway) if gateway is not None else None
        told = sent_ms if seen is None else min(sent_ms, seen.vouched_ms)
        return min(appended_ms, max(told, appended_ms - self.hold_ms))

    def holds(self, worker_id: str, deadline_ms: int, now_ms: int) -> bool:
        """Whether the expiry of `worker_id`'s lease, due at `deadline_ms`, waits for its gateway."""
        if now_ms - deadline_ms >= self.hold_ms:
            return False
        gateway = self.via.get(worker_id)
        seen = self.gateways.get(gateway) if gateway is not None else None
        return seen is not None and seen.vouched_ms < deadline_ms
