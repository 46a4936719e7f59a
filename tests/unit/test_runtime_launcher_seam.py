"""The seam between runtime code and the local launcher: what runtime code finds on its own (the local
Prometheus's targets directory) is the launcher's, and the `spotreel webhooks` process still runs the
janitor although neither service imports the other."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from spotreel.cli import build_parser
from spotreel.devstack.monitoring import Prometheus
from spotreel.platform.scrape_targets import targets_dir
from spotreel.services.janitor.service import build as janitor
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def test_a_worker_announces_itself_where_the_local_prometheus_reads(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), home=tmp_path)
    assert targets_dir(settings) == Prometheus(settings).targets_dir
    assert targets_dir(settings).is_relative_to(tmp_path)


def test_spotreel_webhooks_runs_the_janitor_unless_told_not_to() -> None:
    args = build_parser().parse_args(["webhooks"])
    assert args.func.keywords["companion"] is janitor
    assert args.no_janitor is False
    assert build_parser().parse_args(["webhooks", "--no-janitor"]).no_janitor is True
