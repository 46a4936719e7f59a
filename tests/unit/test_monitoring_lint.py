"""Lint of the monitoring code: the alert rules, the Grafana dashboards (monitoring/dashboards/*.json) and the
console templates (monitoring/consoles/*.html). Every PromQL expression must parse (the real `promtool check
rules`, fed a generated file of recording rules, one per expression) and every metric it names must be one
some spotreel process exports (tests/unit/metrics_catalog.py builds each process's registry), with bucket
bounds written as the Python client writes them ("30.0", not "30"). No promtool here fails the test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.utils import floatToGoString

from tests.unit.metrics_catalog import BUILTIN, exported_names, referenced_names

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
DASHBOARDS = sorted((MONITORING / "dashboards").glob("*.json"))
CONSOLES = sorted((MONITORING / "consoles").glob("*.html"))
# Grafana's own variables, replaced by what Grafana would put there, so promtool can parse the expression.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$pool": ".*"}


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: apt-get install -y prometheus (make test runs tools/system-packages)"
    return path


def _grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"an unknown dashboard variable in {expr!r}"
    return expr


def dashboard_exprs(path: Path) -> list[tuple[str, str]]:
    dash = json.loads(path.read_text())
    return [(f"{path.stem} panel {p['id']} {t['refId']}", _grafana_to_promql(t["expr"]))
            for p in dash["panels"] for t in p.get("targets", [])]


def console_exprs(path: Path) -> list[tuple[str, str]]:
    text = path.read_text()
    found = re.findall(r'query "((?:[^"\\]|\\.)*)"', text)
    return [(f"{path.name} query {i}", q.replace('\\"', '"')) for i, q in enumerate(found)]


def alert_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


def all_exprs() -> list[tuple[str, str]]:
    out = alert_exprs()
    for path in DASHBOARDS:
        out += dashboard_exprs(path)
    for path in CONSOLES:
        out += console_exprs(path)
    return out


def promtool_parses(exprs: list[tuple[str, str]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    rules = {"groups": [{"name": "lint", "rules": [{"record": f"lint:expr_{i}", "expr": e}
                                                  for i, (_, e) in enumerate(exprs)]}]}
    (tmp_path / "lint.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    return subprocess.run([_promtool(), "check", "rules", "lint.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def unknown_names(exprs: list[tuple[str, str]]) -> dict[str, set[str]]:
    known = exported_names() | BUILTIN
    out = {}
    for where, expr in exprs:
        missing = referenced_names(expr) - known
        if missing:
            out[where] = missing
    return out


def bad_bucket_bounds(exprs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for where, expr in exprs:
        for le in re.findall(r'le="([^"]*)"', expr):
            if le != "+Inf" and floatToGoString(float(le)) != le:
                out.setdefault(where, []).append(le)
    return out


def test_there_is_something_to_lint() -> None:
    assert DASHBOARDS and CONSOLES
    assert len(alert_exprs()) == 14


def test_every_expression_parses(tmp_path: Path) -> None:
    exprs = all_exprs()
    done = promtool_parses(exprs, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def test_promtool_refuses_a_broken_expression(tmp_path: Path) -> None:
    done = promtool_parses([("broken", "sum by (pool (rate(spotreel_worker_step_seconds_count[5m]))")], tmp_path)
    assert done.returncode != 0


def test_every_metric_named_is_exported() -> None:
    assert unknown_names(all_exprs()) == {}


def test_the_name_check_catches_a_metric_nobody_exports() -> None:
    # What the alert rules referenced before the scheduler counted preemptions.
    assert unknown_names([("storm", "rate(spotreel_worker_preemptions_total[5m])")]) == {
        "storm": {"spotreel_worker_preemptions_total"}}


def test_bucket_bounds_are_written_as_the_client_writes_them() -> None:
    assert bad_bucket_bounds(all_exprs()) == {}
    assert bad_bucket_bounds([("old rule", 'x_bucket{le="30"}')]) == {"old rule": ["30"]}


def ack_views_counting_refusals(exprs: list[tuple[str, str]]) -> list[str]:
    """Views of the submit ack (POST /v1/videos in the gateway's latency histogram) that do not keep to 202s:
    `spotreel slo` reads the ack of accepted submissions only, and a 429 or 422 answered in a millisecond
    would pull a view's p99 below what an accepted client waited."""
    out = []
    for where, expr in exprs:
        for selector in re.findall(r"spotreel_gateway_request_seconds_bucket\{([^}]*)\}", expr):
            if 'route="/v1/videos"' in selector and 'status="202"' not in selector:
                out.append(where)
    return out


def test_the_ack_views_count_accepted_submissions_as_the_slo_report_does() -> None:
    assert ack_views_counting_refusals(all_exprs()) == []
    assert len([w for w, e in all_exprs() if 'route="/v1/videos",status="202"' in e]) >= 3
    before = 'histogram_quantile(0.99, sum by (le) (rate(spotreel_gateway_request_seconds_bucket{method="POST",route="/v1/videos"}[5m])))'
    assert ack_views_counting_refusals([("console before", before)]) == ["console before"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable_grafana_json(path: Path) -> None:
    dash = json.loads(path.read_text())
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in dash, key
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dash["uid"])
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "pool"} <= variables
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"].strip() for t in p["targets"]), p["title"]
    # No two panels overlap on the grid.
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine
