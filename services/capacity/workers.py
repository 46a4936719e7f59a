"""Which workers hold a lease, from the workers read model (projected from the events)."""

from __future__ import annotations

from typing import Any

from spotreel.services.capacity.manager import StatusLookup


def status_lookup(session: Any) -> StatusLookup:
    stmt = session.prepare("SELECT worker_id, status FROM workers WHERE worker_id IN ?")

    def lookup(worker_ids: list[str]) -> dict[str, str]:
        return {row.worker_id: row.status for row in session.execute(stmt, [list(worker_ids)]) if row.status}

    return lookup
