"""The BACKWARD-compatibility check: each Avro resolution rule by hand-made schema pairs (rules and fastavro
must both give the expected verdict), every schema file in the repo, the CLI, and `release`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema

from spotreel.cli import main
from spotreel.codec.compat import check_pair, check_schemas
from spotreel.codec.registry import SchemaLoadError
from spotreel.codec.release import ReleaseRefused, release

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"


def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "spotreel.v1", "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "E", "symbols": list(symbols), **extra}


def arr(items: Any) -> dict[str, Any]:
    return {"type": "array", "items": items}


def mp(values: Any) -> dict[str, Any]:
    return {"type": "map", "values": values}


def sub(*fields: dict[str, Any], name: str = "Sub", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def fixed(size: int) -> dict[str, Any]:
    return {"type": "fixed", "name": "F", "size": size}


BASE = rec(f("id", "string"), f("n", "long"))
HAS_SUB = rec(f("s", sub(f("a", "string"))))
LINKED = rec(f("next", ["null", "R"], default=None), f("v", "long"))

# (case, old writer schema, new reader schema, BACKWARD compatible?)
PAIRS: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("identical", BASE, BASE, True),
    ("doc and order-only attributes do not matter", BASE, rec(f("id", "string", doc="x"), f("n", "long"), doc="y"), True),
    ("new field with default", BASE, rec(f("id", "string"), f("n", "long"), f("x", "string", default="")), True),
    ("new optional field with null default", BASE, rec(f("id", "string"), f("n", "long"), f("x", ["null", "long"], default=None)), True),
    ("new field without default", BASE, rec(f("id", "string"), f("n", "long"), f("x", "string")), False),
    ("removed field", BASE, rec(f("id", "string")), True),
    ("field renamed with a reader alias", BASE, rec(f("id", "string"), f("count", "long", aliases=["n"])), True),
    ("field renamed without alias or default", BASE, rec(f("id", "string"), f("count", "long")), False),
    ("field renamed without alias, with default", BASE, rec(f("id", "string"), f("count", "long", default=0)), True),
    # Promotions the specification allows.
    ("int -> long", rec(f("v", "int")), rec(f("v", "long")), True),
    ("int -> float", rec(f("v", "int")), rec(f("v", "float")), True),
    ("int -> double", rec(f("v", "int")), rec(f("v", "double")), True),
    ("long -> float", rec(f("v", "long")), rec(f("v", "float")), True),
    ("long -> double", rec(f("v", "long")), rec(f("v", "double")), True),
    ("float -> double", rec(f("v", "float")), rec(f("v", "double")), True),
    ("string -> bytes", rec(f("v", "string")), rec(f("v", "bytes")), True),
    ("bytes -> string", rec(f("v", "bytes")), rec(f("v", "string")), True),
    # ... and the changes it does not.
    ("long -> int", rec(f("v", "long")), rec(f("v", "int")), False),
    ("double -> float", rec(f("v", "double")), rec(f("v", "float")), False),
    ("double -> long", rec(f("v", "double")), rec(f("v", "long")), False),
    ("float -> long", rec(f("v", "float")), rec(f("v", "long")), False),
    ("string -> long", rec(f("v", "string")), rec(f("v", "long")), False),
    ("boolean -> long", rec(f("v", "boolean")), rec(f("v", "long")), False),
    ("long -> string", rec(f("v", "long")), rec(f("v", "string")), False),
    ("primitive -> record", rec(f("v", "string")), rec(f("v", rec(f("a", "string"), name="Sub"))), False),
    # Unions.
    ("value -> optional", rec(f("v", "string")), rec(f("v", ["null", "string"], default=None)), True),
    ("optional -> value", rec(f("v", ["null", "string"], default=None)), rec(f("v", "string")), False),
    ("union gains a branch", rec(f("v", ["null", "string"])), rec(f("v", ["null", "string", "long"])), True),
    ("union loses a branch", rec(f("v", ["null", "string", "long"])), rec(f("v", ["null", "string"])), False),
    ("union branches reordered", rec(f("v", ["null", "string"])), rec(f("v", ["string", "null"], default="")), True),
    ("value into union by promotion", rec(f("v", "long")), rec(f("v", ["null", "double"], default=None)), True),
    ("union branch promoted", rec(f("v", ["null", "int"])), rec(f("v", ["null", "long"])), True),
    ("union branch demoted", rec(f("v", ["null", "long"])), rec(f("v", ["null", "int"])), False),
    ("value into union with no match", rec(f("v", "boolean")), rec(f("v", ["null", "string"], default=None)), False),
    # Enums.
    ("enum gains a symbol", rec(f("e", enum("A", "B"))), rec(f("e", enum("A", "B", "C"))), True),
    ("enum symbols reordered", rec(f("e", enum("A", "B"))), rec(f("e", enum("B", "A"))), True),
    ("enum loses a symbol", rec(f("e", enum("A", "B", "C"))), rec(f("e", enum("A", "B"))), False),
    ("enum loses a symbol, reader has enum default", rec(f("e", enum("A", "B", "C"))), rec(f("e", enum("A", "B", default="A"))), True),
    # Arrays and maps resolve their items/values.
    ("array items promoted", rec(f("a", arr("int"))), rec(f("a", arr("long"))), True),
    ("array items changed", rec(f("a", arr("string"))), rec(f("a", arr("long"))), False),
    ("array -> map", rec(f("a", arr("string"))), rec(f("a", mp("string"))), False),
    ("map values promoted", rec(f("m", mp("float"))), rec(f("m", mp("double"))), True),
    ("map values changed", rec(f("m", mp("long"))), rec(f("m", mp("boolean"))), False),
    # Named types.
    ("nested record gains a defaulted field", HAS_SUB, rec(f("s", sub(f("a", "string"), f("b", "long", default=1)))), True),
    ("nested record gains a required field", HAS_SUB, rec(f("s", sub(f("a", "string"), f("b", "long")))), False),
    ("nested record renamed", HAS_SUB, rec(f("s", sub(f("a", "string"), name="Other"))), False),
    ("nested record renamed with alias", HAS_SUB, rec(f("s", sub(f("a", "string"), name="Other", aliases=["Sub"]))), True),
    ("top-level record renamed with alias", BASE, rec(*BASE["fields"], name="R2", aliases=["spotreel.v1.R"]), True),
    ("fixed size changed", rec(f("x", fixed(4))), rec(f("x", fixed(8))), False),
    ("fixed unchanged", rec(f("x", fixed(4))), rec(f("x", fixed(4))), True),
    ("recursive record unchanged", LINKED, LINKED, True),
    ("recursive record gains a required field", LINKED, rec(*LINKED["fields"], f("w", "long")), False),
]


@pytest.mark.parametrize(("writer", "reader", "compatible"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS])
def test_rules_and_fastavro_agree_on_each_case(writer: dict, reader: dict, compatible: bool) -> None:
    verdict = check_pair(parse_schema(reader), parse_schema(writer))
    assert (not verdict.rule_problems) is compatible, verdict.rule_problems
    assert (not verdict.empirical_problems) is compatible, verdict.empirical_problems
    assert verdict.compatible is compatible


def test_problem_messages_name_the_field() -> None:
    verdict = check_pair(parse_schema(rec(f("id", "string"), f("n", "long"), f("x", "string"))), parse_schema(BASE))
    assert verdict.rule_problems == ["R.x: new field without a default (old records do not have it)"]
    verdict = check_pair(parse_schema(rec(f("e", enum("A")))), parse_schema(rec(f("e", enum("A", "B")))))
    assert verdict.rule_problems == ["R.e: enum symbols removed without an enum default: B"]


# -- the repo's schemas ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo_reports() -> dict[str, Any]:
    return {report.source: report for report in check_schemas(SCHEMAS)}


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.avsc")), ids=lambda p: p.name)
def test_schema_file_passes_the_compatibility_check(path: Path, repo_reports: dict[str, Any]) -> None:
    report = repo_reports[path.name]
    assert report.ok, report.problems
    assert report.status in ("new", "unchanged", "compatible")
    assert not report.notes


def test_no_released_schema_was_removed(repo_reports: dict[str, Any]) -> None:
    assert [r.full_name for r in repo_reports.values() if r.status == "removed"] == []


def test_cli_check_passes_on_the_repo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas", "check", "--schemas", str(SCHEMAS)]) == 0
    assert "0 failing" in capsys.readouterr().out
    assert main(["schemas", "check"]) == 0  # the installed package's directory is the same one


# -- whole directories: transitive history, removals, and `release` -------------------------------------------


def _write(path: Path, schema: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=2))


def test_every_released_version_is_checked_not_only_the_last(tmp_path: Path) -> None:
    # v1 had `x`; v2 dropped it; bringing it back as required breaks reading v2 data, though v1 is fine.
    _write(tmp_path / "released" / "R.v1.avsc", rec(f("id", "string"), f("x", "long")))
    _write(tmp_path / "released" / "R.v2.avsc", rec(f("id", "string")))
    _write(tmp_path / "R.avsc", rec(f("id", "string"), f("x", "long")))
    (report,) = check_schemas(tmp_path)
    assert report.status == "incompatible" and report.versions == (1, 2)
    assert report.problems[0] == "vs v2: R.x: new field without a default (old records do not have it)"
    assert all(p.startswith("vs v2 (fastavro): ") for p in report.problems[1:]) and len(report.problems) > 1
    _write(tmp_path / "R.avsc", rec(f("id", "string"), f("x", "long", default=0)))
    assert check_schemas(tmp_path)[0].status == "compatible"


def test_a_released_schema_that_disappears_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "released" / "Gone.v1.avsc", rec(f("id", "string"), name="Gone"))
    _write(tmp_path / "R.avsc", BASE)
    statuses = {r.full_name: r.status for r in check_schemas(tmp_path)}
    assert statuses == {"spotreel.v1.Gone": "removed", "spotreel.v1.R": "new"}
    assert main(["schemas", "check", "--schemas", str(tmp_path)]) == 1
    assert "removed      spotreel.v1.Gone" in capsys.readouterr().out


def test_cli_check_fails_on_an_incompatible_change_to_a_repo_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    raw = json.loads((copy / "RenewLease.avsc").read_text())
    _write(copy / "released" / "RenewLease.v999.avsc", raw)
    raw["fields"].append({"name": "mandatory", "type": "string"})
    _write(copy / "RenewLease.avsc", raw)
    assert main(["schemas", "check", "-q", "--schemas", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "incompatible spotreel.v1.RenewLease" in out and "RenewLease.mandatory: new field without a default" in out


def test_release_copies_new_and_changed_schemas_and_refuses_breaking_ones(tmp_path: Path) -> None:
    _write(tmp_path / "R.avsc", BASE)
    plan = release(tmp_path)
    assert [(p.full_name, str(p.target), p.version) for p in plan] == [("spotreel.v1.R", "released/R.v1.avsc", 1)]
    assert (tmp_path / "released" / "R.v1.avsc").read_bytes() == (tmp_path / "R.avsc").read_bytes()
    assert release(tmp_path) == []  # unchanged: nothing to do

    _write(tmp_path / "R.avsc", {**BASE, "doc": "only a doc change"})
    assert release(tmp_path) == []  # the canonical form ignores docs

    _write(tmp_path / "R.avsc", rec(f("id", "string"), f("n", "long"), f("x", "long", default=0)))
    assert [p.version for p in release(tmp_path, dry_run=True)] == [2]
    assert not (tmp_path / "released" / "R.v2.avsc").exists()
    assert [p.version for p in release(tmp_path)] == [2]

    _write(tmp_path / "R.avsc", rec(f("id", "string"), f("n", "string"), f("x", "long", default=0)))
    with pytest.raises(ReleaseRefused) as info:
        release(tmp_path)
    assert info.value.reports[0].status == "incompatible"
    assert sorted(p.name for p in (tmp_path / "released").iterdir()) == ["R.v1.avsc", "R.v2.avsc"]


def test_release_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "R.avsc", BASE)
    assert main(["schemas", "release", "--schemas", str(tmp_path), "--dry-run"]) == 0
    assert "would release spotreel.v1.R as released/R.v1.avsc" in capsys.readouterr().out
    assert main(["schemas", "release", "--schemas", str(tmp_path)]) == 0
    assert main(["schemas", "release", "--schemas", str(tmp_path)]) == 0
    assert "nothing to release" in capsys.readouterr().out
    _write(tmp_path / "R.avsc", rec(f("id", "string")))
    _write(tmp_path / "released" / "R.v1.avsc", rec(f("id", "long")))
    assert main(["schemas", "release", "--schemas", str(tmp_path)]) == 1


def test_badly_named_released_file_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "released" / "R.avsc", BASE)
    with pytest.raises(SchemaLoadError, match="<Name>.v<N>.avsc"):
        check_schemas(tmp_path)
