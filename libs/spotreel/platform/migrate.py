"""Versioned CQL migrations: migrations/NNNN_name.cql, applied in order, recorded in schema_migrations.

Applying twice is a no-op. A migration that was edited after it was applied is refused (its checksum
no longer matches), because the database would silently differ from what the file says.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from spotreel.platform.errors import InfraError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.cql$")
_KEYSPACE = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    cql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.cql.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def load_migrations(package: str = "spotreel.platform") -> list[Migration]:
    found: dict[int, Migration] = {}
    for entry in resources.files(package).joinpath("migrations").iterdir():
        m = _FILE.match(entry.name)
        if not m:
            continue
        version = int(m.group(1))
        if version in found:
            raise InfraError(f"cassandra: two migrations numbered {version:04d}")
        found[version] = Migration(version, m.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def statements(cql: str) -> list[str]:
    """The statements of a migration: `--` comments dropped and split at `;`, neither inside a quoted string
    (a table comment may hold both; `''` inside a string is a quote, as CQL has it)."""
    out: list[str] = []
    current: list[str] = []
    line: list[str] = []
    quoted = False
    i = 0
    while i < len(cql):
        ch = cql[i]
        if quoted:
            line.append(ch)
            quoted = ch != "'"  # a doubled quote closes and reopens: the same text, the same state after
        elif ch == "'":
            line.append(ch)
            quoted = True
        elif cql.startswith("--", i):
            while i < len(cql) and cql[i] != "\n":
                i += 1
            continue
        elif ch == ";":
            current.append("".join(line).rstrip())
            line = []
            out.append("\n".join(c for c in current if c.strip()).strip())
            current = []
        elif ch == "\n":
            current.append("".join(line).rstrip())
            line = []
        else:
            line.append(ch)
        i += 1
    current.append("".join(line).rstrip())
    out.append("\n".join(c for c in current if c.strip()).strip())
    return [s for s in out if s]


def keyspace_cql(keyspace: str, replication: int = 1, datacenter: str = "datacenter1") -> str:
    """One replica: SimpleStrategy (the single-node stack, as it always was). More: NetworkTopologyStrategy in
    `datacenter` (the cluster profile, a managed cluster), so a second datacenter can be added later."""
    if not _KEYSPACE.match(keyspace):
        raise InfraError(f"cassandra: invalid keyspace name {keyspace!r} (letters, digits, _; max 48)")
    if replication <= 1:
        strategy = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    else:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", datacenter):
            raise InfraError(f"cassandra: invalid datacenter name {datacenter!r}")
        strategy = f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': {int(replication)}}}"
    return f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {strategy}"


def migrate(session, keyspace: str, say=print, migrations: list[Migration] | None = None, *,
            replication: int = 1, datacenter: str = "datacenter1", settle=None) -> list[str]:
    """Apply what is missing; returns the labels applied by this call. `replication`, `datacenter`: the
    keyspace's, when this call creates it (an existing keyspace keeps its own). `settle`: called after the
    keyspace and after each migration's statements, before it is recorded, by a caller whose session does
    not wait for schema agreement after every statement (devstack/cassandra_cluster.py)."""
    migrations = load_migrations() if migrations is None else migrations
    session.execute(keyspace_cql(keyspace, replication, datacenter))
    session.set_keyspace(keyspace)
    session.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version int PRIMARY KEY, name text, checksum text, applied_at timestamp)"
    )
    if settle is not None:
        settle()
    applied = {row.version: row for row in session.execute("SELECT version, name, checksum FROM schema_migrations")}
    done = []
    for m in migrations:
        row = applied.get(m.version)
        if row is not None:
            if row.checksum != m.checksum:
                raise InfraError(
                    f"cassandra: migration {m.label} changed after it was applied to keyspace {keyspace}",
                    ["add a new migration file instead of editing an applied one",
                     "(or start over with `spotreel infra up --fresh`)"],
                )
            continue
        for stmt in statements(m.cql):
            # Every statement is IF NOT EXISTS, so a migration interrupted half-way can simply rerun.
            session.execute(stmt)
        if settle is not None:
            settle()
        session.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) "
            "VALUES (%s, %s, %s, toTimestamp(now())) IF NOT EXISTS",
            (m.version, m.name, m.checksum),
        )
        done.append(m.label)
    total = len(migrations)
    if done:
        say(f"cassandra: keyspace {keyspace}: applied {', '.join(done)} ({total} migrations)")
    else:
        say(f"cassandra: keyspace {keyspace}: schema up to date ({total} migrations)")
    return done
