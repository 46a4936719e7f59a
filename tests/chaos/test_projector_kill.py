"""kill -9 of a projector mid-stream, then a restart: the tables still equal the fold of the events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.integration.projector_kit import (assert_tables_are_the_fold, interleave, make_histories, produce,
                                             projector_lane)

# Fixtures live with the integration tests.
from tests.integration.conftest import cassandra_cluster, cql, kafka_admin, make_topic  # noqa: F401


def _projector(s, *args: str) -> subprocess.Popen:
    env = dict(os.environ, SPOTREEL_TOPIC_PREFIX=s.topic_prefix, SPOTREEL_CASSANDRA_KEYSPACE=s.cassandra_keyspace)
    return subprocess.Popen([sys.executable, "-m", "spotreel.cli", "projector", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_kill_9_mid_stream_then_restart_gives_the_same_tables(stack, settings, make_topic, cql, unique):  # noqa: F811
    s, topic = projector_lane(settings, unique, cql, make_topic, 3)
    histories = make_histories(n_jobs=150, events_per_job=25, seed=11)
    produce(stack.kafka_bootstrap, topic, interleave(histories))

    first = _projector(s, "--batch-size", "20")  # small batches: many commits to die between
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = cql.execute(f"SELECT count(*) FROM {unique}.events_by_job").one()[0]
            if n >= 100:
                break
            assert first.poll() is None, first.stdout.read()
            time.sleep(0.05)
        else:
            raise AssertionError("the projector wrote nothing within 60 s")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    total = sum(len(h) for h in histories)
    done = cql.execute(f"SELECT count(*) FROM {unique}.events_by_job").one()[0]
    assert done < total * 0.95, "killed too late to prove anything"

    second = _projector(s, "--until-idle")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    restored = int(out.rsplit(" job states restored", 1)[0].rsplit(" ", 1)[-1])
    assert restored > 0, out  # jobs met mid-history were folded back from events_by_job
    assert_tables_are_the_fold(cql, unique, histories)
