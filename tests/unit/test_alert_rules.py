"""The alert rules in monitoring/alerts.yml, unit-tested by the real `promtool test rules` (Debian's
prometheus package; tools/system-packages installs it when promtool is missing). No promtool here fails the test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: apt-get install -y prometheus (make test runs tools/system-packages)"
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_rules_file_is_valid() -> None:
    done = _run("check", "rules", "alerts.yml", cwd=MONITORING)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 14 rules found" in done.stdout


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    done = _run("test", "rules", "alerts_test.yml", cwd=MONITORING)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    # The promtool tests would notice if the consumer-lag threshold drifted above what they feed in.
    rules = (MONITORING / "alerts.yml").read_text()
    assert "spotreel_scheduler_consumer_lag) > 1000" in rules
    (tmp_path / "alerts.yml").write_text(rules.replace("spotreel_scheduler_consumer_lag) > 1000",
                                                       "spotreel_scheduler_consumer_lag) > 10000"))
    shutil.copy(MONITORING / "alerts_test.yml", tmp_path / "alerts_test.yml")
    done = _run("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "SpotreelConsumerLag" in done.stdout + done.stderr
