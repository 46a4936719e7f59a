"""The operator's erasure (`spotreel erase video|tenant`) and key handling (`spotreel keys check|rotate`).

The same steps as the gateway's DELETE (services/gateway/public/erasure.py), run from the command line with
the deployment's settings: data key, objects, claim text, EraseJob. A tenant's erase takes every job of its
read model and every data key the keystore holds for it (its schedules' too: a schedule's key is deleted
and the schedule itself deleted, so no occurrence runs with a prompt nobody can read).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from spotreel.domain import commands as cmd
from spotreel.personal.kek import LocalKek
from spotreel.personal.objects import delete_job_objects
from spotreel.personal.vault import Vault


@dataclass
class Erased:
    jobs: list[str] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)
    objects: int = 0


@dataclass
class Eraser:
    settings: Any
    session: Any
    vault: Vault | None
    s3: Any
    send: Callable[[Any], None]  # produce a command and wait for its acknowledgement

    def job(self, job_id: str, tenant_id: str, by: str, reason: str = "operator", out: Erased | None = None) -> Erased:
        out = out or Erased()
        if self.vault is not None:
            self.vault.erase_sync(job_id, tenant_id)
        out.objects += delete_job_objects(self.s3, self.settings, job_id)
        self.session.execute("UPDATE submission_claims SET prompt = null, params = null WHERE job_id = %s", (job_id,))
        self.send(cmd.EraseJob(uuid.uuid4().hex, job_id, by=by, reason=reason))
        out.jobs.append(job_id)
        return out

    def tenant(self, tenant_id: str, by: str, reason: str = "tenant_erased") -> Erased:
        out = Erased()
        jobs = {r.job_id for r in self.session.execute(
            "SELECT job_id FROM jobs_by_tenant WHERE tenant_id = %s", (tenant_id,))}
        keys = set(self.vault.tenant_key_ids(tenant_id)) if self.vault is not None else set()
        schedules = {r.schedule_id for r in self.session.execute(
            "SELECT schedule_id FROM schedules_by_tenant WHERE tenant_id = %s", (tenant_id,))}
        for job_id in sorted(jobs | {k for k in keys if k.startswith("j")}):
            self.job(job_id, tenant_id, by, reason, out)
        for schedule_id in sorted(schedules | {k for k in keys if not k.startswith("j")}):
            if self.vault is not None:
                self.vault.erase_sync(schedule_id, tenant_id)
            self.session.execute("UPDATE submission_claims SET prompt = null, params = null WHERE job_id = %s",
                                 (schedule_id,))
            self.send(cmd.DeleteSchedule(uuid.uuid4().hex, schedule_id))
            out.schedules.append(schedule_id)
        return out


def tenant_of(session: Any, vault: Vault | None, job_id: str) -> str | None:
    row = session.execute("SELECT tenant_id FROM jobs_by_id WHERE job_id = %s", (job_id,)).one()
    if row is not None and row.tenant_id:
        return str(row.tenant_id)
    stored = vault.keystore.get(job_id) if vault is not None else None
    return stored.tenant_id if stored is not None else None


def rotate(vault: Vault, new_kek_file: Path) -> int:
    """Re-wrap every data key under the KEK in `new_kek_file`; the log is not touched. Then point
    SPOTREEL_KEK_FILE at it (and SPOTREEL_KEK_PREVIOUS_FILE at the old one while processes restart)."""
    return vault.rotate(LocalKek.from_file(new_kek_file))
