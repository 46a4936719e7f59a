"""The few log lines shown when a server does not start, taken only from what this start wrote."""

from __future__ import annotations

import pytest

from spotreel.devstack.loggist import LogMark, gist

pytestmark = pytest.mark.unit

CASSANDRA_DEATH = """\
INFO  [main] 2026-01-01 00:00:01,000 CassandraDaemon.java:600 - Hostname: vm
WARN  [main] 2026-01-01 00:00:02,000 StartupChecks.java:320 - JMX is not enabled to receive remote connections.
ERROR [main] 2026-01-01 00:00:03,000 CassandraDaemon.java:900 - Exception encountered during startup
org.apache.cassandra.exceptions.ConfigurationException: Invalid yaml: file:/x/cassandra.yaml
\tat org.apache.cassandra.config.YamlConfigurationLoader.loadConfig(YamlConfigurationLoader.java:140)
\tat org.apache.cassandra.service.CassandraDaemon.main(CassandraDaemon.java:800)
Caused by: org.yaml.snakeyaml.error.YAMLException: Unable to find property 'memtable_spaec' on class Config
\t... 5 more
"""


def test_picks_the_error_and_its_root_cause_not_stack_frames():
    lines = gist(CASSANDRA_DEATH, ignore=("JMX is not enabled",))
    assert len(lines) == 3
    assert lines[-1].startswith("Caused by: org.yaml.snakeyaml.error.YAMLException: Unable to find property")
    assert any("ConfigurationException: Invalid yaml" in ln for ln in lines)
    assert not any(ln.startswith("at ") for ln in lines)
    assert not any("JMX" in ln for ln in lines)


def test_falls_back_to_the_last_lines_when_nothing_looks_like_an_error():
    assert gist("starting\nloading\nstill loading\n", limit=2) == ["loading", "still loading"]


def test_long_lines_are_shortened():
    (line,) = gist("ERROR " + "x" * 1000, width=80)
    assert len(line) == 80 and line.endswith("…")


def test_mark_reads_only_what_was_written_after_it(tmp_path):
    log = tmp_path / "system.log"
    log.write_text("ERROR from yesterday's run\n")
    mark = LogMark.at_end(log)
    with open(log, "a") as f:
        f.write("ERROR today: port in use\n")
    assert mark.new_text() == "ERROR today: port in use\n"
    assert gist(mark.new_text()) == ["ERROR today: port in use"]


def test_mark_of_a_log_that_does_not_exist_yet(tmp_path):
    mark = LogMark.at_end(tmp_path / "later.log")
    assert mark.new_text() == ""
    (tmp_path / "later.log").write_text("Error: Could not create the Java Virtual Machine.\n")
    assert gist(mark.new_text()) == ["Error: Could not create the Java Virtual Machine."]
