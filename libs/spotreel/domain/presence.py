"""An idle worker a gateway vouches for in its pulse (GatewayPulse.idle in domain/commands.py).

The scheduler learns of idle workers from their lease requests: pool stats count them, and preemption spares
a lease when a free worker can take the job. An idle worker of a gateway's lease poll asked its own partition
every few seconds only to be counted, and each ask was a decision and an answer nobody needed. The gateway now
lists those workers in its pulse to their partition instead (services/gateway/worker_api/idlepolls.py), and
the owner counts each as it would count its RequestWork.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdleWorker:
    """What an idle worker's lease poll offers, as its RequestWork would say it (no request, no answer)."""

    worker_id: str
    gpu_type: str
    models: tuple[str, ...]
    warm_models: tuple[str, ...] = ()
