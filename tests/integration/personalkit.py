"""Reading back what the gateway sealed: a record read off a topic with its personal fields opened by the
keystore of the test's keyspace (spotreel/personal/), as the services that need the text open it."""

from __future__ import annotations

import dataclasses
from typing import Any

from spotreel.personal.fields import JOB_PERSONAL, open_spec_sync
from spotreel.personal.setup import open_cassandra_vault


def plain(settings: Any, session: Any, record: Any) -> Any:
    vault = open_cassandra_vault(settings, session)
    if vault is None:
        return record
    changes: dict[str, Any] = {}
    if getattr(record, "spec", None) is not None:
        changes["spec"] = open_spec_sync(record.spec, vault)
    for name in JOB_PERSONAL:
        if hasattr(record, name):
            changes[name] = vault.open_sync(name, getattr(record, name))
    return dataclasses.replace(record, **changes)
