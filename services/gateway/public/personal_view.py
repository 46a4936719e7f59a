"""The plain text of a job's personal fields, for the answers the tenant reads (spotreel/personal/).

The read models and claims hold envelopes; the gateway opens them only here, where a view is answered, and
never stores what it opened. A field of an erased job (its data key deleted) is null.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, TypeVar

from spotreel.personal.fields import open_mapping
from spotreel.personal.vault import Vault

T = TypeVar("T")


async def opened(vault: Vault | None, found: T) -> T:
    """A JobView, Claim or JobListItem with its prompt (and params' personal values) in plain text."""
    if vault is None:
        return found
    changes: dict[str, Any] = {"prompt": await vault.open_or_none("prompt", getattr(found, "prompt"))}
    params = getattr(found, "params", None)
    if isinstance(params, dict):
        changes["params"] = await open_mapping(params, vault)
    return dataclasses.replace(found, **changes)  # type: ignore[type-var]


async def opened_all(vault: Vault | None, items: list[T]) -> list[T]:
    if vault is None:
        return items
    return list(await asyncio.gather(*(opened(vault, i) for i in items)))
