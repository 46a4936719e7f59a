"""An in-memory model of Cassandra's "newest timestamp wins" cells, for the projection's RowOps.

Per cell the highest timestamp wins; at equal timestamps a delete beats a write and a greater value beats
a smaller one (Cassandra compares the bytes; here the repr, which only matters for different values at
the same timestamp, which the projector never produces). A row with a live cell or a live row marker
(INSERT writes one) is visible.
"""

from __future__ import annotations

import random
from typing import Any, Iterable

from spotreel.services.projector.projection import project
from spotreel.services.projector.rows import Envelope, RowOp


class Tables:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, tuple], dict[str, Any]] = {}

    def apply(self, op: RowOp) -> None:
        row = self.rows.setdefault(op.row_id, {"__tomb": -1, "__marker": -1})
        if op.delete:
            row["__tomb"] = max(row["__tomb"], op.timestamp)
            return
        row["__marker"] = max(row["__marker"], op.timestamp)
        for col, value in op.values:
            old = row.get(col)
            if old is None or (op.timestamp, repr(value)) > (old[0], repr(old[1])):
                row[col] = (op.timestamp, value)

    def apply_all(self, ops: Iterable[RowOp]) -> "Tables":
        for op in ops:
            self.apply(op)
        return self

    def snapshot(self) -> dict[tuple[str, tuple], dict[str, Any]]:
        out = {}
        for rid, row in self.rows.items():
            tomb = row["__tomb"]
            cells = {c: v for c, (ts, v) in ((c, x) for c, x in row.items() if not c.startswith("__"))
                     if ts > tomb}
            if cells or row["__marker"] > tomb:
                out[rid] = {c: v for c, v in cells.items() if v is not None}
        return out

    def table(self, name: str) -> dict[tuple, dict[str, Any]]:
        return {key: row for (t, key), row in self.snapshot().items() if t == name}


def project_all(events: Iterable[Any], state: Any = None) -> tuple[Any, list[list[RowOp]]]:
    """Fold and project in order; one op list per event."""
    per_event = []
    for event in events:
        state, ops = project(state, event, Envelope(b"x", "spotreel.v1." + type(event).__name__))
        per_event.append(ops)
    return state, per_event


def scrambled(per_event: list[list[RowOp]], rnd: random.Random) -> list[RowOp]:
    """Every op at least once, some twice, in any order: what concurrent writes and replays may do."""
    ops = [op for group in per_event for op in group]
    ops += [op for op in ops if rnd.random() < 0.3]
    rnd.shuffle(ops)
    return ops
