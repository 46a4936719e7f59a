"""The key-encryption key on the real Cassandra: a gateway process started with another KEK, or with its KEK
file lost, exits at once with a clear error instead of serving (never opening garbage); `spotreel keys
rotate` re-wraps every data key without touching the log, after which the new KEK opens what was sealed and
the old one is refused at start."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from spotreel.devstack.services import settings_env
from spotreel.personal.kek import LocalKek, create_kek_file
from spotreel.personal.keystore import CassandraKeystore
from spotreel.personal.setup import open_vault
from spotreel.platform.migrate import migrate

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _spotreel(s, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTREEL_")}
    env.update(settings_env(s))
    return subprocess.run([sys.executable, "-m", "spotreel.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_wrong_or_lost_kek_stops_the_gateway_at_start_and_rotation_rewraps(settings, unique, cql, tmp_path):
    s = replace(settings, cassandra_keyspace=unique, kek_file=str(tmp_path / "kek"), gateway_port=0)
    migrate(cql, unique, say=lambda *_: None)
    vault = open_vault(s, CassandraKeystore(cql))  # the first start: the file is made
    sealed = vault.sealer_sync("j" + "1" * 32, "alpha").seal("prompt", "a quiet harbour")
    old_raw = Path(s.kek_file).read_bytes()

    wrong = tmp_path / "wrong"
    create_kek_file(wrong)
    run = _spotreel(replace(s, kek_file=str(wrong)), "gateway", "--port", "0")
    assert run.returncode != 0 and "refusing to start" in run.stderr, run.stderr[-2000:]
    lost = _spotreel(replace(s, kek_file=str(tmp_path / "gone")), "gateway", "--port", "0")
    assert lost.returncode != 0 and "is missing" in lost.stderr, lost.stderr[-2000:]
    assert not (tmp_path / "gone").exists()  # a keystore with keys never gets a new KEK made for it
    assert _spotreel(s, "keys", "check").returncode == 0

    new = tmp_path / "new"
    assert _spotreel(s, "keys", "new", str(new)).returncode == 0
    rotated = _spotreel(s, "keys", "rotate", str(new))
    assert rotated.returncode == 0 and "re-wrapped 1 data key" in rotated.stdout, rotated.stderr
    after = open_vault(replace(s, kek_file=str(new)), CassandraKeystore(cql))
    assert after.open_sync("prompt", sealed) == "a quiet harbour"  # the same envelope, untouched
    assert _spotreel(s, "keys", "check").returncode == 1  # the old KEK is refused now
    for out in (run, lost, rotated):
        for form in (old_raw.strip().decode(), Path(new).read_text().strip()):
            assert form not in out.stdout + out.stderr
    assert LocalKek.from_file(new).kek_id in rotated.stdout
