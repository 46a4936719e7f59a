"""The services' garbage-collector setting (spotreel.runtime.gctune, settings.gc_threshold). `install` runs in a
child interpreter: it would change the collector of pytest's own process for the rest of the session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spotreel.runtime.gctune import parse
from spotreel.config.settings import Settings


def _after(setting: str) -> str:
    code = ("import gc; from spotreel.runtime import gctune; before = gc.get_freeze_count(); "
            f"print(gctune.install({setting!r}), gc.get_threshold(), gc.get_freeze_count() > before)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_default_setting_freezes_start_up_and_collects_less_often() -> None:
    assert Settings().gc_threshold == "7000,20,100"
    assert _after("7000,20,100") == "(7000, 20, 100) (7000, 20, 100) True"


def test_an_empty_setting_keeps_pythons_collector_as_it_is() -> None:
    assert _after("") == "None (700, 10, 10) False"


@pytest.mark.parametrize("bad", ["7000", "7000,20", "a,b,c", "7000,0,100", "1,2,3,4"])
def test_a_malformed_setting_is_refused_at_start_with_its_variable(bad: str) -> None:
    with pytest.raises(ValueError, match="SPOTREEL_GC_THRESHOLD must be three positive integers"):
        parse(bad)
    with pytest.raises(ValueError, match="SPOTREEL_GC_THRESHOLD"):
        Settings.from_env({"SPOTREEL_GC_THRESHOLD": bad})


def test_the_environment_chooses() -> None:
    assert Settings.from_env({"SPOTREEL_GC_THRESHOLD": ""}).gc_threshold == ""
    assert Settings.from_env({"SPOTREEL_GC_THRESHOLD": "50000,50,50"}).gc_threshold == "50000,50,50"
