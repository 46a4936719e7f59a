"""docs/SETTINGS.md is the one list of every knob: it must match the code, describe every knob, name each
variable once, and list every SPOTREEL_* variable the code reads. The service options it lists really are
read from the environment (a flag still wins; a bad value stops the command with the variable's name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spotreel import cli
from spotreel.config import knobs
from spotreel.docs import settings as settings_catalogue

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# Read by the code but not a knob: a test hook that makes a worker's step hang (worker/render_loop.py).
NOT_KNOBS = {"SPOTREEL_TEST_HANG_STEP"}


def test_the_catalogue_is_up_to_date():
    assert settings_catalogue.main(["--check"]) == 0, "run: python -m spotreel.docs.settings"


def test_every_knob_has_a_description_and_every_variable_one_knob():
    seen: dict[str, str] = {}
    for title, table in settings_catalogue.rows().items():
        for name, env, _default, meaning in table:
            assert meaning.strip(), f"{title}: {name} has no description (a comment above the field, or help=)"
            assert env not in seen, f"{env} is both {seen[env]} and {title}: {name}"
            seen[env] = f"{title}: {name}"


def test_every_variable_the_code_reads_is_in_the_catalogue():
    listed = {env for table in settings_catalogue.rows().values() for _n, env, _d, _m in table}
    named = set()
    for folder in ("libs", "services", "worker"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r"SPOTREEL_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    missing = named - listed - NOT_KNOBS
    assert not missing, f"read by the code, missing from docs/SETTINGS.md: {sorted(missing)}"


def _parse(env: dict[str, str], argv: list[str]):
    parser = cli.build_parser()
    knobs.apply(parser, env)
    return parser.parse_args(argv)


def test_a_service_option_comes_from_the_environment_and_a_flag_wins():
    env = {"SPOTREEL_CAPACITY_CEILING": "7", "SPOTREEL_CAPACITY_TARGET_WAIT": "30.5",
           "SPOTREEL_WEBHOOKS_NO_JANITOR": "1", "SPOTREEL_WORKER_POOL": "a@x b@x",
           "SPOTREEL_CAPACITY_WORKER_ARGV": "python -m w --pool {pool}"}
    args = _parse(env, ["capacity"])
    assert (args.ceiling, args.target_wait) == (7, 30.5)
    assert args.worker_argv == ["python", "-m", "w", "--pool", "{pool}"]
    assert _parse(env, ["capacity", "--ceiling", "3"]).ceiling == 3
    assert _parse(env, ["webhooks"]).no_janitor is True
    assert _parse(env, ["worker"]).pool == ["a@x", "b@x"]
    assert _parse(env, ["worker", "--pool", "c@y"]).pool == ["c@y"]
    assert _parse({}, ["capacity"]).ceiling == 2


def test_operations_are_not_read_from_the_environment():
    assert _parse({"SPOTREEL_PROJECTOR_TRUNCATE": "1", "SPOTREEL_PROJECTOR_REBUILD": "1"}, ["projector"]).rebuild is False


@pytest.mark.parametrize("env, message", [
    ({"SPOTREEL_CAPACITY_CEILING": "many"}, "SPOTREEL_CAPACITY_CEILING must be an integer, got 'many'"),
    ({"SPOTREEL_WORKER_MTBF": "1h"}, "SPOTREEL_WORKER_MTBF must be a number, got '1h'"),
    ({"SPOTREEL_CAPACITY_PROVIDER": "cloud"}, "SPOTREEL_CAPACITY_PROVIDER must be one of local, simulated"),
    ({"SPOTREEL_WEBHOOKS_NO_JANITOR": "maybe"}, "SPOTREEL_WEBHOOKS_NO_JANITOR must be 1 or 0"),
])
def test_a_bad_value_names_its_variable(env, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        knobs.apply(cli.build_parser(), env)


def test_the_cli_refuses_a_bad_service_variable_before_running(monkeypatch, capsys):
    monkeypatch.setenv("SPOTREEL_SCHEDULER_METRICS_PORT", "nine")
    assert cli.main(["scheduler"]) == 2
    assert "SPOTREEL_SCHEDULER_METRICS_PORT must be an integer" in capsys.readouterr().err


def test_the_gateway_refuses_a_bad_policy_variable_before_serving(monkeypatch, capsys):
    monkeypatch.setenv("SPOTREEL_GATEWAY_MAX_FPS", "fast")
    assert cli.main(["gateway"]) == 2
    assert "SPOTREEL_GATEWAY_MAX_FPS must be an integer, got 'fast'" in capsys.readouterr().err


def test_a_field_description_is_the_comment_above_it():
    class Example:
        # First line,
        # second line.
        a: int = 1
        b: int = 2  # inline
        c: int = 3

    notes = knobs.field_comments(Example)
    assert notes == {"a": "First line, second line.", "b": "inline", "c": ""}
