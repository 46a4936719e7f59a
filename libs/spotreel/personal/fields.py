"""Which fields are personal, and sealing/opening them on the records that carry them.

A field is personal by being listed: the render spec's in `spotreel.domain.spec.PERSONAL_SPEC_FIELDS` (the
domain empties them from an erased job's state too; `SPEC_PERSONAL` here), the job's own in `JOB_PERSONAL`.
Adding a personal string field (an input image reference, say) is adding its name to one of the tuples; every record that carries it (SubmitJob, JobSubmitted, JobState, WorkAssigned, the schedule
records, the read models' params) is then sealed and opened with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

from spotreel.domain.spec import PERSONAL_SPEC_FIELDS
from spotreel.personal.vault import Sealer, Vault

SPEC_PERSONAL: tuple[str, ...] = PERSONAL_SPEC_FIELDS
JOB_PERSONAL: tuple[str, ...] = ("callback_url",)
ALL_PERSONAL: tuple[str, ...] = (*SPEC_PERSONAL, *JOB_PERSONAL)

R = TypeVar("R")


def seal_record(record: R, sealer: Sealer) -> R:
    """`record` (a dataclass with a `spec` and possibly job-level personal fields) with each one sealed."""
    changes: dict[str, Any] = {}
    spec = getattr(record, "spec", None)
    if spec is not None:
        changes["spec"] = dataclasses.replace(spec, **{
            f: sealer.seal(f, getattr(spec, f)) for f in SPEC_PERSONAL if hasattr(spec, f)})
    for f in JOB_PERSONAL:
        if hasattr(record, f):
            changes[f] = sealer.seal(f, getattr(record, f))
    return dataclasses.replace(record, **changes)  # type: ignore[type-var]


def seal_mapping(values: Mapping[str, Any], sealer: Sealer) -> dict[str, Any]:
    """A flat mapping (the read models' params, a claim's) with its personal values sealed."""
    return {k: sealer.seal(k, v) if k in ALL_PERSONAL and isinstance(v, str) else v for k, v in values.items()}


async def open_spec(spec: R, vault: Vault) -> R:
    """The spec with its personal fields in plain text (the worker renders from it). Raises Erased."""
    return dataclasses.replace(spec, **{  # type: ignore[type-var]
        f: await vault.open(f, getattr(spec, f)) for f in SPEC_PERSONAL if hasattr(spec, f)})


def open_spec_sync(spec: R, vault: Vault) -> R:
    return dataclasses.replace(spec, **{  # type: ignore[type-var]
        f: vault.open_sync(f, getattr(spec, f)) for f in SPEC_PERSONAL if hasattr(spec, f)})


async def open_mapping(values: Mapping[str, Any], vault: Vault) -> dict[str, Any]:
    """A flat mapping with its personal values opened; an erased one is None."""
    out = dict(values)
    for k in ALL_PERSONAL:
        if isinstance(out.get(k), str):
            out[k] = await vault.open_or_none(k, out[k])
    return out
