"""What the scheduler's verdict on a lease holder's command tells the holder.

A renewal's verdict (LeaseRenewed, or ProgressReported, which renews too) carries the new expiry and the
holder's instructions as of that verdict: stop (a cancel was requested) or checkpoint and hand the lease back
(a drain: the job was paused). Any other accepted event only says "accepted"; a CommandRejected says why; no
verdict in time means pending (the command is durable and will be judged). Both the gateway's answer to an
HTTP worker and the Kafka worker transport read it from here.
"""

from __future__ import annotations

from typing import Any

from spotreel.domain import events as ev
from spotreel.domain.leases import renew_in_s


def instructions(verdict: Any) -> dict[str, Any] | None:
    """`{"cancel", "drain", "lease_expires_at_ms"}` from a renewal's verdict; None for any other verdict."""
    if isinstance(verdict, (ev.LeaseRenewed, ev.ProgressReported)):
        return {"cancel": verdict.cancel_requested, "drain": verdict.drain_requested,
                "lease_expires_at_ms": verdict.lease_expires_at_ms}
    return None


def pace(verdict: Any, waited_s: float, lease_ttl_ms: int, slow_s: float = 1.0) -> float | None:
    """Seconds the holder should stay quiet before its next renewal when the control plane is behind (the
    verdict took longer than `slow_s`, or is still pending); None when it is keeping up."""
    return renew_in_s(None if verdict is None else waited_s, lease_ttl_ms, slow_s=slow_s)
