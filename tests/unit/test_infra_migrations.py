"""Versioned CQL migrations: ordered, recorded, applied once, and an edited one is refused."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from spotreel.platform.errors import InfraError
from spotreel.platform.migrate import Migration, keyspace_cql, load_migrations, migrate, statements

pytestmark = pytest.mark.unit


class FakeSession:
    """Just enough of a cassandra-driver session: records statements, keeps schema_migrations rows."""

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.rows: dict[int, SimpleNamespace] = {}
        self.keyspace = None

    def set_keyspace(self, ks: str) -> None:
        self.keyspace = ks

    def execute(self, stmt: str, params: tuple = ()):
        self.executed.append(stmt)
        if stmt.startswith("SELECT version"):
            return list(self.rows.values())
        if stmt.startswith("INSERT INTO schema_migrations"):
            version, name, checksum = params
            self.rows.setdefault(version, SimpleNamespace(version=version, name=name, checksum=checksum))
        return []


def test_first_migration_has_the_read_models():
    migrations = load_migrations()
    assert migrations[0].label == "0001_read_models"
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    tables = {re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", s).group(1) for s in statements(migrations[0].cql)}
    assert {"jobs_by_id", "jobs_by_tenant", "events_by_job", "attempts_by_job", "pool_stats", "workers",
            "tenants", "api_keys"} <= tables


def test_every_statement_can_be_rerun():
    for m in load_migrations():
        for stmt in statements(m.cql):
            # Or a table's options set again (ALTER TABLE ... WITH): the same options, whatever ran before.
            options = re.fullmatch(r"ALTER TABLE \w+ WITH .*", stmt, re.S) is not None
            assert "IF NOT EXISTS" in stmt or options, f"{m.label}: {stmt[:60]}"


def test_jobs_by_tenant_is_newest_first():
    cql = load_migrations()[0].cql
    block = cql[cql.index("CREATE TABLE IF NOT EXISTS jobs_by_tenant"):]
    block = block[: block.index(";")]
    assert "PRIMARY KEY ((tenant_id), created_at, job_id)" in block
    assert "CLUSTERING ORDER BY (created_at DESC" in block


def test_statement_splitting_ignores_comments():
    cql = "-- a comment; with a semicolon\nCREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY); -- tail;\n\n" \
          "CREATE TABLE IF NOT EXISTS b (\n  y int PRIMARY KEY -- why\n);\n"
    assert statements(cql) == ["CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY)",
                               "CREATE TABLE IF NOT EXISTS b (\n  y int PRIMARY KEY\n)"]


def test_applying_twice_is_a_no_op():
    session = FakeSession()
    ms = [Migration(1, "one", "CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY);"),
          Migration(2, "two", "CREATE TABLE IF NOT EXISTS b (x int PRIMARY KEY);")]
    said: list[str] = []
    assert migrate(session, "ks", said.append, ms) == ["0001_one", "0002_two"]
    assert session.keyspace == "ks"
    first_run = list(session.executed)
    assert migrate(session, "ks", said.append, ms) == []
    rerun = session.executed[len(first_run):]
    assert not any(s.startswith("CREATE TABLE IF NOT EXISTS a") for s in rerun)
    assert said[-1] == "cassandra: keyspace ks: schema up to date (2 migrations)"


def test_only_new_migrations_run():
    session = FakeSession()
    one = Migration(1, "one", "CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY);")
    migrate(session, "ks", lambda _: None, [one])
    two = Migration(2, "two", "CREATE TABLE IF NOT EXISTS b (x int PRIMARY KEY);")
    assert migrate(session, "ks", lambda _: None, [one, two]) == ["0002_two"]


def test_an_edited_applied_migration_is_refused():
    session = FakeSession()
    migrate(session, "ks", lambda _: None, [Migration(1, "one", "CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY);")])
    edited = Migration(1, "one", "CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY, y int);")
    with pytest.raises(InfraError, match="migration 0001_one changed after it was applied"):
        migrate(session, "ks", lambda _: None, [edited])


def test_keyspace_is_simple_strategy_rf1_and_names_are_checked():
    assert "'class': 'SimpleStrategy', 'replication_factor': 1" in keyspace_cql("spotreel")
    with pytest.raises(InfraError):
        keyspace_cql("drop keyspace x; --")


def test_settle_comes_before_each_record_and_before_the_tables_are_used():
    session = FakeSession()
    ms = [Migration(1, "one", "CREATE TABLE IF NOT EXISTS a (x int PRIMARY KEY);"),
          Migration(2, "two", "CREATE TABLE IF NOT EXISTS b (x int PRIMARY KEY);")]
    migrate(session, "ks", lambda _: None, ms, settle=lambda: session.executed.append("-- settled"))
    kinds = [s.split(" (")[0] for s in session.executed]
    assert kinds == ["CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', "
                     "'replication_factor': 1}".split(" (")[0],
                     "CREATE TABLE IF NOT EXISTS schema_migrations", "-- settled",
                     "SELECT version, name, checksum FROM schema_migrations",
                     "CREATE TABLE IF NOT EXISTS a", "-- settled", "INSERT INTO schema_migrations",
                     "CREATE TABLE IF NOT EXISTS b", "-- settled", "INSERT INTO schema_migrations"]


def test_a_semicolon_or_dashes_inside_a_quoted_string_belong_to_the_statement():
    cql = ("ALTER TABLE a WITH comment = 'it''s a; b -- c';\n"
           "-- a comment; with a semicolon\nALTER TABLE b WITH comment = 'x'; -- tail\n")
    assert statements(cql) == ["ALTER TABLE a WITH comment = 'it''s a; b -- c'", "ALTER TABLE b WITH comment = 'x'"]


def test_every_shipped_migration_splits_as_the_old_line_splitter_did_where_no_string_holds_a_separator():
    def by_lines(cql: str) -> list[str]:
        lines = [line.split("--", 1)[0].rstrip() for line in cql.splitlines()]
        return [s.strip() for s in "\n".join(x for x in lines if x.strip()).split(";") if s.strip()]

    for m in load_migrations():
        quoted = "".join(m.cql.split("'")[1::2])  # the text inside quotes
        if ";" not in quoted and "--" not in quoted:
            assert statements(m.cql) == by_lines(m.cql), m.name
        assert all(s.count("'") % 2 == 0 for s in statements(m.cql)), m.name
