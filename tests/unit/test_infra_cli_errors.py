"""Every way `spotreel infra` can be used wrongly ends in one clear line and a non-zero exit."""

from __future__ import annotations

import os
import socket

import pytest

from spotreel.cli import main
from tests.unit.infra_env import isolate

pytestmark = pytest.mark.unit


def run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def headline(err: list[str]) -> str:
    """The one unindented line; hints below it are indented."""
    lines = [ln for ln in err if ln and not ln.startswith(" ")]
    assert len(lines) == 1, f"expected exactly one clear line, got: {err}"
    assert not any("Traceback" in ln for ln in err), err
    return lines[0]


def test_unknown_infra_subcommand(capsys):
    code, _, err = run(capsys, "infra", "bogus")
    assert code != 0
    assert err == ["spotreel infra: unknown command 'bogus' (choose from fetch, up, down, status)"]


def test_missing_infra_subcommand(capsys):
    code, _, err = run(capsys, "infra")
    assert code != 0
    assert err == ["spotreel infra: missing command (choose from fetch, up, down, status)"]


def test_home_that_cannot_be_created(capsys, monkeypatch, tmp_path):
    # A path below a regular file fails for root too (chmod would not stop root).
    blocker = tmp_path / "somefile"
    blocker.write_text("")
    isolate(monkeypatch, tmp_path, home=blocker / "sub")
    code, _, err = run(capsys, "infra", "up")
    assert code == 1
    assert headline(err) == f"home directory {blocker / 'sub'} is not writable ({blocker / 'sub'}: Not a directory)"


def test_read_only_home(capsys, monkeypatch, tmp_path):
    home = tmp_path / "ro"
    home.mkdir()
    home.chmod(0o500)
    isolate(monkeypatch, tmp_path, home=home)
    try:
        if os.geteuid() == 0:
            # root ignores the mode bits; a file where data/ must go stops root as well.
            home.chmod(0o700)
            (home / "data").write_text("")
        code, _, err = run(capsys, "infra", "up")
    finally:
        home.chmod(0o700)
    assert code == 1
    assert headline(err).startswith(f"home directory {home} is not writable (")


@pytest.mark.parametrize("listen", [False, True], ids=["bound", "listening"])
def test_port_taken_by_another_process(capsys, monkeypatch, tmp_path, listen):
    env = isolate(monkeypatch, tmp_path)
    port = int(env["SPOTREEL_KAFKA_PORT"])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        if listen:
            squatter.listen()
        code, out, err = run(capsys, "infra", "up")
    assert code == 1
    assert headline(err) == f"kafka: port {port} on 127.0.0.1 is already in use by another process"
    if listen:  # a listener shows up in /proc/net/tcp, so we can name who holds it
        assert any(f"held by pid {os.getpid()}" in ln for ln in err), err
    # Refused before anything was started.
    run_dir = tmp_path / "home" / "run"
    assert not list(run_dir.glob("*.pid"))


def test_missing_java_is_refused_before_anything_starts(capsys, monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path, java_bin=tmp_path / "no-such-java")
    code, _, err = run(capsys, "infra", "up")
    assert code == 1
    assert headline(err).startswith("kafka: Java not found")
    assert not list((tmp_path / "home" / "run").glob("*.pid"))


def test_maven_unreachable(capsys, monkeypatch, tmp_path):
    with socket.socket() as s:  # a port with nobody behind it
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    repo = f"http://127.0.0.1:{dead}/maven2"
    isolate(monkeypatch, tmp_path, maven_repo_url=repo)
    code, _, err = run(capsys, "infra", "fetch")
    assert code == 1
    assert headline(err).startswith(f"fetch: cannot reach {repo} to download kafka ")
    assert any(ln.strip().startswith("log: ") for ln in err)


def test_missing_maven(capsys, monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path, maven_bin="no-such-mvn")
    code, _, err = run(capsys, "infra", "fetch")
    assert code == 1
    assert headline(err) == "fetch: Maven not found ('no-such-mvn' is not on PATH)"


def test_status_of_a_stack_that_is_not_running(capsys, monkeypatch, tmp_path):
    import json

    isolate(monkeypatch, tmp_path)
    code, out, _ = run(capsys, "infra", "status", "--json")
    assert code == 1
    report = json.loads("\n".join(out))
    assert report["healthy"] is False
    assert [c["name"] for c in report["components"]] == ["kafka", "cassandra", "s3", "scheduler", "projector", "gateway", "webhooks"]
    assert {c["state"] for c in report["components"]} == {"stopped"}


def test_down_with_nothing_running(capsys, monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    code, out, err = run(capsys, "infra", "down")
    assert code == 0, err
    assert out == ["stack down: nothing was running"]
