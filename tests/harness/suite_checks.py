"""Checks on the test session itself, loaded by tests/conftest.py.

- A session that selects nothing fails: a marker expression or a path that matches no test would otherwise
  pass CI green with nothing proved (pytest's exit 5 is easy to swallow). When the whole suite is run (no
  paths given), every marker the `-m` expression asks for must select at least one test too, so that
  `-m "integration or chaos"` cannot lose the chaos tests without notice. Under pytest-xdist (`-n`) each
  worker collects and checks, and the controller fails the session with the worker's reason.
- A test outside the chaos suite that takes longer than `--test-time-limit` seconds (setup and call; a
  module fixture's start counts in the first test that uses it) fails, so CI's time cannot creep up one slow
  test at a time. Chaos tests kill and restart real servers and are bounded by their own timeouts instead.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator

import pytest

DEFAULT_TIME_LIMIT_S = 60.0
EXEMPT_MARKER = "chaos"
_SETUP_S = pytest.StashKey[float]()
_PROBLEM = "suite_checks_problem"
_PROBLEMS = pytest.StashKey[set[str]]()


def asked_markers(markexpr: str, known: Iterable[str]) -> list[str]:
    """The markers of `known` that the `-m` expression asks for (named, and not right after a `not`)."""
    words = re.findall(r"[A-Za-z_][\w]*|\(|\)", markexpr)
    asked = []
    for i, word in enumerate(words):
        if word in known and not (i > 0 and words[i - 1] == "not") and word not in asked:
            asked.append(word)
    return asked


def selection_problem(n_selected: int, markexpr: str, empty_markers: list[str]) -> str | None:
    """Why the session's selection proves nothing, or None when it is fine."""
    if n_selected == 0:
        how = f" by -m {markexpr!r}" if markexpr else ""
        return f"no test selected{how}: a run that tests nothing fails"
    if empty_markers:
        return (f"-m {markexpr!r} selects no test marked {', '.join(empty_markers)}: the suite lost them "
                "(a marker misapplied, or a directory not collected)")
    return None


def over_limit(seconds: float, limit: float, exempt: bool) -> str | None:
    """The failure message for a test that took `seconds` (setup and call), or None when it may take that."""
    if exempt or limit <= 0 or seconds <= limit:
        return None
    return (f"took {seconds:.1f} s (setup and call), over the {limit:g} s a test outside the chaos suite may take "
            "(tests/harness/suite_checks.py): make it faster, or share what it starts")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="SECONDS",
                     help="fail a test outside the chaos suite that takes longer (setup and call); 0: no limit")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    markexpr = config.getoption("markexpr") or ""
    empty: list[str] = []
    whole = config.args_source in (pytest.Config.ArgsSource.TESTPATHS, pytest.Config.ArgsSource.INVOCATION_DIR)
    if markexpr and session.items and whole:
        known = [line.split(":", 1)[0].strip() for line in config.getini("markers")]
        empty = [m for m in asked_markers(markexpr, known)
                 if not any(item.get_closest_marker(m) for item in session.items)]
    problem = selection_problem(len(session.items), markexpr, empty)
    if problem and not config.getoption("collectonly"):
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is None:
            raise pytest.UsageError(problem)
        # A pytest-xdist worker: an error raised here only crashes the worker, and the controller reports
        # "no tests ran" (exit 5) or an internal error without the reason. The worker runs nothing and hands
        # the reason to the controller, which fails the session with it (below).
        workeroutput[_PROBLEM] = problem
        session.items.clear()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    problem = getattr(node, "workeroutput", {}).get(_PROBLEM)
    if problem:
        config: pytest.Config = node.config  # type: ignore[attr-defined]
        config.stash[_PROBLEMS] = config.stash.get(_PROBLEMS, set()) | {problem}


def pytest_sessionfinish(session: pytest.Session) -> None:
    problems = session.config.stash.get(_PROBLEMS, set())
    if problems:
        for problem in sorted(problems):
            print(f"ERROR: {problem}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    if report.when == "setup":
        item.stash[_SETUP_S] = report.duration
    elif report.when == "call" and report.passed:
        seconds = item.stash.get(_SETUP_S, 0.0) + report.duration
        message = over_limit(seconds, item.config.getoption("test_time_limit"),
                             item.get_closest_marker(EXEMPT_MARKER) is not None)
        if message:
            report.outcome = "failed"
            report.longrepr = message
    return report
