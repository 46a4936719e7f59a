"""Worker pools: which worker may run which job.

A pool is one model version on one GPU type. A worker has exactly one GPU type but may be able to serve
several model versions (it has the weights on disk); it is a member of one pool per servable model. Only
some of those models are *warm* (loaded in GPU memory), which matters because loading a video model costs
far more than a typical scheduling unfairness does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Pool:
    model: str
    gpu_type: str


@dataclass(frozen=True)
class WorkerOffer:
    """A worker asking for work, as the scheduler sees it at the moment of the request."""

    worker_id: str
    gpu_type: str
    models: frozenset[str]
    warm_models: frozenset[str] = frozenset()
    draining: bool = False

    def __post_init__(self) -> None:
        # Accept any iterable from adapters but store frozensets so offers stay hashable and comparable.
        object.__setattr__(self, "models", frozenset(self.models))
        object.__setattr__(self, "warm_models", frozenset(self.warm_models))

    @property
    def pools(self) -> tuple[Pool, ...]:
        # Sorted so that anything iterating over a worker's pools does so in the same order every time.
        return tuple(sorted(Pool(m, self.gpu_type) for m in self.models))

    def serves(self, pool: Pool) -> bool:
        return not self.draining and pool.gpu_type == self.gpu_type and pool.model in self.models

    def is_warm(self, pool: Pool) -> bool:
        return pool.gpu_type == self.gpu_type and pool.model in self.warm_models
