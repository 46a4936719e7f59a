"""The session's own checks (tests/harness/suite_checks.py): an empty selection and a slow test fail the run.

The pure rules are tested directly; then a throwaway suite in a temporary directory is run by a real pytest
with the plugin loaded, to prove the hooks turn those rules into a failing exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness.suite_checks import asked_markers, over_limit, selection_problem

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ("unit", "integration", "e2e", "chaos")


def test_the_markers_an_expression_asks_for() -> None:
    assert asked_markers("integration or e2e or chaos", KNOWN) == ["integration", "e2e", "chaos"]
    assert asked_markers("not unit", KNOWN) == []
    assert asked_markers("(integration or e2e) and not chaos", KNOWN) == ["integration", "e2e"]
    assert asked_markers("unit and unit", KNOWN) == ["unit"]
    assert asked_markers("slowish", KNOWN) == []


def test_an_empty_selection_is_a_problem_and_a_full_one_is_not() -> None:
    assert "no test selected by -m 'unit'" in str(selection_problem(0, "unit", []))
    assert "no test selected:" in str(selection_problem(0, "", []))
    assert "selects no test marked chaos" in str(selection_problem(12, "integration or chaos", ["chaos"]))
    assert selection_problem(12, "integration or chaos", []) is None
    assert selection_problem(1, "", []) is None


def test_only_a_test_past_the_limit_and_outside_chaos_fails() -> None:
    assert over_limit(60.0, 60.0, exempt=False) is None
    assert "took 60.5 s" in str(over_limit(60.5, 60.0, exempt=False))
    assert over_limit(600.0, 60.0, exempt=True) is None
    assert over_limit(600.0, 0.0, exempt=False) is None


def _pytest(suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    chaos: kills\n    unit: pure\n    integration: servers\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.harness.suite_checks", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "-q", *args], cwd=suite, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_real_session_fails_on_a_slow_test_and_on_an_empty_selection(tmp_path: Path) -> None:
    (tmp_path / "test_slow.py").write_text(
        "import time, pytest\n\n"
        "@pytest.fixture\ndef slow_start():\n    time.sleep(0.3)\n\n"
        "def test_slow_in_its_fixture(slow_start):\n    pass\n\n"
        "@pytest.mark.chaos\ndef test_slow_but_chaos():\n    time.sleep(0.6)\n\n"
        "@pytest.mark.unit\ndef test_quick():\n    pass\n")
    limited = _pytest(tmp_path, "--test-time-limit", "0.25")
    assert limited.returncode == 1, limited.stdout + limited.stderr
    assert "1 failed, 2 passed" in limited.stdout, limited.stdout
    assert "test_slow_in_its_fixture" in limited.stdout and "over the 0.25 s" in limited.stdout, limited.stdout

    unlimited = _pytest(tmp_path, "--test-time-limit", "5")
    assert unlimited.returncode == 0, unlimited.stdout + unlimited.stderr

    empty = _pytest(tmp_path, "test_slow.py", "-m", "unit and chaos")
    assert empty.returncode != 0 and "no test selected" in empty.stdout + empty.stderr, empty.stdout + empty.stderr
    # The whole suite (no path given): a marker the expression names must select something.
    lost = _pytest(tmp_path, "-m", "unit or integration")
    assert lost.returncode != 0, lost.stdout + lost.stderr
    assert "selects no test marked integration" in lost.stdout + lost.stderr, lost.stdout + lost.stderr
    assert _pytest(tmp_path, "-m", "unit or chaos", "--test-time-limit", "5").returncode == 0


def test_the_profiles_scale_what_a_test_asks_for() -> None:
    from tests.harness.hypothesis_profiles import examples

    assert [examples(1000, p) for p in ("ci", "dev", "deep")] == [250, 1000, 10000]
    assert examples(20, "ci") == 10  # a floor: a property still gets a search


def test_the_same_checks_fail_a_session_split_over_xdist_workers(tmp_path: Path) -> None:
    """Under `-n`, collection runs in the workers: the controller must still fail the run, with the reason."""
    (tmp_path / "test_some.py").write_text(
        "import time, pytest\n\n"
        "@pytest.mark.unit\ndef test_quick():\n    pass\n\n"
        "@pytest.mark.unit\ndef test_slow():\n    time.sleep(0.6)\n\n"
        "@pytest.mark.chaos\ndef test_chaos():\n    pass\n")
    split = ("-p", "xdist", "-n", "2")
    empty = _pytest(tmp_path, *split, "test_some.py", "-m", "unit and chaos")
    assert empty.returncode == 4 and "no test selected" in empty.stderr, empty.stdout + empty.stderr
    lost = _pytest(tmp_path, *split, "-m", "unit or integration")
    assert lost.returncode == 4, lost.stdout + lost.stderr
    assert "selects no test marked integration" in lost.stderr, lost.stdout + lost.stderr
    slow = _pytest(tmp_path, *split, "-m", "unit", "--test-time-limit", "0.3")
    assert slow.returncode == 1 and "1 failed, 1 passed" in slow.stdout, slow.stdout + slow.stderr
    assert _pytest(tmp_path, *split, "-m", "unit or chaos", "--test-time-limit", "5").returncode == 0
