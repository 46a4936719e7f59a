"""`released/`: every schema version that ever shipped, `released/<Name>.v<N>.avsc`, never edited again.

Releasing copies each current schema whose canonical form differs from its latest released version (or
that has none) to the next version number. It refuses while the compatibility check fails, so the directory
only ever gains versions that the current reader can resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.abc import Traversable
from pathlib import Path

from spotreel.codec.compat import SchemaReport, check_schemas
from spotreel.codec.registry import RELEASED_DIR, load_current, load_released, schema_root


class ReleaseRefused(Exception):
    def __init__(self, reports: list[SchemaReport]) -> None:
        super().__init__(f"{len(reports)} schema(s) fail the compatibility check")
        self.reports = reports


@dataclass(frozen=True)
class Released:
    full_name: str
    source: str
    target: Path
    version: int


def _writable(root: Traversable) -> Path:
    if not isinstance(root, Path):
        raise ValueError(f"{root} is not a directory on disk; pass --schemas DIR")
    return root


def release(directory: Path | str | None = None, *, dry_run: bool = False) -> list[Released]:
    root = schema_root(directory)
    failing = [r for r in check_schemas(root) if not r.ok]
    if failing:
        raise ReleaseRefused(failing)
    current = load_current(root)
    released = load_released(root)
    plan: list[Released] = []
    for name, entry in current.items():
        versions = released.get(name, [])
        if versions and versions[-1].fingerprint == entry.fingerprint:
            continue
        number = (versions[-1].version or 0) + 1 if versions else 1
        stem = entry.source.removesuffix(".avsc")
        plan.append(Released(name, entry.source, Path(RELEASED_DIR) / f"{stem}.v{number}.avsc", number))
    if dry_run or not plan:
        return plan
    base = _writable(root)
    (base / RELEASED_DIR).mkdir(exist_ok=True)
    for item in plan:
        target = base / item.target
        if target.exists():  # a released version is immutable, whatever happened to the others
            raise FileExistsError(f"{target} already exists")
        # Byte-for-byte copy, so docs and formatting survive; the fingerprint ignores both anyway.
        target.write_bytes((base / item.source).read_bytes())
    return plan
