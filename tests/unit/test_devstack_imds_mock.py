"""The EC2 metadata mock's command line: loopback only, IMDSv2 only, the notices the test asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotreel.devstack.imds_mock import NEVER_S, ImdsMock, binary_path
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_bound_to_loopback_imdsv2_only_in_spot_mode() -> None:
    argv = ImdsMock(Path("/bin/mock"), 18339, Path("/tmp/x"), spot_after_s=5).argv()
    assert argv[:2] == ["/bin/mock", "spot"] and "-I" in argv
    assert flag(argv, "-n") == "127.0.0.1" and flag(argv, "-p") == "18339"
    assert flag(argv, "--mock-delay-sec") == "5" and flag(argv, "--rebalance-delay-sec") == str(NEVER_S)
    assert flag(argv, "--action") == "terminate" and "--time" not in argv


def test_a_rebalance_only_mock_with_a_pinned_notice_time() -> None:
    argv = ImdsMock(Path("/bin/mock"), 1, Path("/tmp/x"), rebalance_after_s=0, action="stop",
                    action_time="2030-01-01T00:00:00Z").argv()
    assert flag(argv, "--mock-delay-sec") == str(NEVER_S) and flag(argv, "--rebalance-delay-sec") == "0"
    assert flag(argv, "--action") == "stop" and flag(argv, "--time") == "2030-01-01T00:00:00Z"


def test_the_binary_lives_in_the_cache_dir_per_version(tmp_path: Path) -> None:
    path = binary_path(Settings(cache_dir=tmp_path))
    assert path.is_relative_to(tmp_path / "go") and "v1.13.0" in str(path)
