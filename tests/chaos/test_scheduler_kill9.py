"""kill -9 of the scheduler in the middle of a stream of commands, then a restart: no event lost, none
duplicated, and the state (the table) equal to the fold of the events topic."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from spotreel.adapters.kafka import produce_command
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.services.scheduler import replay
from tests.integration.schedkit import Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

pytestmark = pytest.mark.chaos

JOBS = 120
GHOSTS = 30


def _stream(bus: Bus, run: str) -> tuple[list, list[str]]:
    subs = [submit("acme", f"{run}-{i}") for i in range(JOBS)]
    ghosts = [f"jghost{run}{i}" for i in range(GHOSTS)]
    rounds = [
        subs,
        [c.Reprioritize(f"rp-{s.job_id}", s.job_id, 7) for s in subs],
        [c.PauseJob(f"pa-{s.job_id}", s.job_id, "user") for s in subs],
        [c.ResumeJob(f"re-{s.job_id}", s.job_id) for s in subs],
    ]
    commands = [cmd for r in rounds for cmd in r]
    for i, g in enumerate(ghosts):
        commands.insert(i * len(commands) // GHOSTS, c.CancelJob(f"cx-{g}", g, "user"))
    return commands, [s.job_id for s in subs] + ghosts


def test_kill9_mid_stream_loses_and_duplicates_nothing(stack, tmp_path):
    settings = scheduler_settings("k" + uuid.uuid4().hex[:10], partitions=3)
    make_topics(settings)
    bus = Bus(settings)
    procs = [SchedulerProc(settings, tmp_path, "first")]
    try:
        procs[0].wait_owning({0, 1, 2})
        commands, _ = _stream(bus, uuid.uuid4().hex[:6])

        def produce() -> None:
            for cmd in commands:
                produce_command(bus.prod, settings, bus.codec, cmd)
                bus.prod.poll(0)
                time.sleep(0.004)
            bus.prod.flush(30)

        sender = threading.Thread(target=produce)
        sender.start()
        # Kill once the scheduler has visibly started on the stream, well before the stream ends.
        bus.wait_for(lambda: len(bus.events) >= 60, 30, "the scheduler to get going")
        procs[0].kill9()
        at_kill = len(bus.events)
        expected = JOBS * 5 + GHOSTS
        assert 0 < at_kill < expected
        procs.append(SchedulerProc(settings, tmp_path, "second"))
        procs[1].wait_owning({0, 1, 2}, timeout=90)
        sender.join(60)
        bus.wait_for(lambda: len(bus.events) >= expected, 90, f"{expected} events")
        bus.poll(2.0)  # anything extra (a duplicate) would show up now

        accepted = [e for e in bus.events if not isinstance(e, ev.CommandRejected)]
        rejected = [e for e in bus.events if isinstance(e, ev.CommandRejected)]
        dup = [k for k, n in Counter((e.job_id, e.version) for e in accepted).items() if n > 1]
        assert not dup, f"duplicated events: {dup[:5]}"
        assert set(Counter(e.causation_id for e in rejected).values()) == {1}
        assert len(rejected) == GHOSTS and {e.reason for e in rejected} == {"unknown_job"}
        per_job = Counter(e.job_id for e in accepted)
        assert len(per_job) == JOBS and set(per_job.values()) == {5}, "lost events"
        for job_id in per_job:
            kinds = [type(e).__name__ for e in bus.job_events(job_id)]
            assert kinds == ["JobSubmitted", "JobQueued", "JobReprioritized", "JobPaused", "JobResumed"], kinds
        assert len(bus.events) == expected
        print("\n".join(line for line in procs[1].log().splitlines() if "partition" in line and "marker" in line))

        # The table (its compacted changelog) equals the fold of the events topic.
        deadline = time.time() + 20
        while True:
            report = replay.rebuild(settings, bus.codec)
            if report.ok or time.time() > deadline:
                break
            time.sleep(1)
        assert report.ok, report.summary()
        assert report.jobs == JOBS
    except BaseException:
        # CI shows captured stdout of a failed test: both schedulers' own account of what they did.
        for p in procs:
            print(f"----- tail of {p.log_path.name} -----\n{p.log()[-6000:]}")
        raise
    finally:
        for p in procs:
            p.stop()
        bus.close()
        drop_topics(settings)
