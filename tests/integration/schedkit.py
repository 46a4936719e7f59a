"""Running the real scheduler as a subprocess against per-test topics, and simulated workers/clients that
talk to it through Kafka with the codec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.adapters.kafka import assignments_topic, delete_topics, ensure_scheduler_topics, produce_command, producer
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.evolve import fold
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec
from spotreel.platform.topics import commands_topic, commands_deadletter_topic, events_topic, replies_topic
from spotreel.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MODEL, GPU = "tiny-t2v", "cpu"
POOL = ids.pool_key(MODEL, GPU)


def submit(tenant: str, key: str, **overrides: Any) -> c.SubmitJob:
    """A SubmitJob; an override named like a RenderSpec field (model, prompt, seed, ...) goes into its spec."""
    spec = {name: overrides.pop(name) for name in SPEC_FIELDS if name in overrides}
    base = c.SubmitJob(
        command_id=f"submit-{tenant}-{key}", job_id=ids.job_id_for(tenant, key), tenant=tenant,
        idempotency_key=key, request_hash="h1", gpu_type=GPU,
        spec=RenderSpec(model=MODEL, prompt="a red fox in snow", duration_s=2.0, resolution="64x64", fps=8, seed=7,
                        num_steps=20))
    return replace(base, spec=replace(base.spec, **spec), **overrides)


class SchedulerProc:
    def __init__(self, settings: Settings, tmp: Path, name: str = "a", args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
        self.settings = settings
        self.log_path = tmp / f"scheduler-{name}.log"
        env = dict(os.environ, SPOTREEL_TOPIC_PREFIX=settings.topic_prefix,
                   SPOTREEL_PARTITIONS=str(settings.partitions), PYTHONUNBUFFERED="1", **(env or {}))
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spotreel.cli", "scheduler", "--data-dir", str(tmp / f"faust-{name}"), *args],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_owning(self, partitions: set[int] | None = None, timeout: float = 60.0, after: int = 0) -> set[int]:
        """Wait for an 'owns partitions' line (after byte offset `after`) and return what it owns."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()[after:]
            owned = None
            for line in text.splitlines():
                if "scheduler owns partitions" in line:
                    inner = line.split("scheduler owns partitions", 1)[1].split("]", 1)[0].strip(" [")
                    owned = {int(x) for x in inner.split(",") if x.strip()}
            if owned is not None and (partitions is None or owned == partitions):
                return owned
            if self.proc.poll() is not None:
                raise AssertionError(f"scheduler exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"scheduler did not take partitions {partitions} in {timeout}s:\n{self.log()[-4000:]}")

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._log.close()


class Bus:
    """A client and a crowd of simulated workers: produce commands, read events and answers."""

    def __init__(self, settings: Settings, codec: Codec | None = None):
        self.settings = settings
        self.codec = codec or Codec.default()
        self.prod = producer(settings)
        self.events: list[Any] = []
        self.event_offsets: list[tuple[int, int]] = []
        self.answers: dict[str, Any] = {}
        self.answer_log: list[Any] = []  # every answer read, duplicates included
        self._ec = self._consumer(events_topic(settings))
        self._ac = self._consumer(assignments_topic(settings))
        # Renewals the scheduler answered without an event (domain/renewals.py).
        self.replies: list[Any] = []
        self._rc = self._consumer(replies_topic(settings))
        self._ids = 0

    def _consumer(self, topic: str) -> Consumer:
        cons = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap, "group.id": f"bus-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(self.settings.partitions)])
        return cons

    def next_id(self, prefix: str = "cmd") -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}-{uuid.uuid4().hex[:6]}"

    def send(self, command: Any, partition: int | None = None) -> None:
        produce_command(self.prod, self.settings, self.codec, command, partition)
        self.prod.flush(10)

    def send_raw(self, key: bytes, value: bytes, partition: int) -> int:
        """Produce raw bytes to the commands topic; returns the record's offset."""
        got: list[Any] = []
        self.prod.produce(commands_topic(self.settings), key=key, value=value, partition=partition,
                          on_delivery=lambda err, msg: got.append((err, msg)))
        self.prod.flush(10)
        err, msg = got[0]
        assert err is None, err
        return msg.offset()

    def send_at(self, command: Any, partition: int) -> int:
        """Produce `command` to `partition`; returns its offset on the commands topic."""
        key = getattr(command, "job_id", None) or getattr(command, "schedule_id", None) or command.worker_id
        return self.send_raw(key.encode(), self.codec.encode_message(command), partition)

    def poll(self, seconds: float = 0.2) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for cons, kind in ((self._ec, "events"), (self._ac, "answers"), (self._rc, "replies")):
                for msg in cons.consume(500, 0.02):
                    if msg.error():
                        continue
                    obj = self.codec.decode_message(msg.value())
                    if kind == "replies":
                        self.replies.append(obj)
                    elif kind == "events":
                        self.events.append(obj)
                        self.event_offsets.append((msg.partition(), msg.offset()))
                    else:
                        self.answers[obj.request_id] = obj
                        self.answer_log.append(obj)

    def wait_for(self, pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll(0.05)
            got = pred()
            if got:
                return got
        raise AssertionError(f"timed out waiting for {what}; last events: {self.events[-8:]}")

    def job_events(self, job_id: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "job_id", None) == job_id]

    def job_replies(self, job_id: str) -> list[Any]:
        return [r for r in self.replies if r.job_id == job_id]

    def renewals_accepted(self, job_id: str) -> int:
        """Renewals answered as accepted: persisted (an event) or absorbed (a reply)."""
        return sum(isinstance(e, (ev.LeaseRenewed, ev.ProgressReported))
                   for e in [*self.job_events(job_id), *self.job_replies(job_id)])

    def state(self, job_id: str):
        return fold(self.job_events(job_id))

    def wait_event(self, job_id: str, cls: type, timeout: float = 20.0, count: int = 1) -> Any:
        return self.wait_for(lambda: (lambda es: es[count - 1] if len(es) >= count else None)(
            [e for e in self.job_events(job_id) if isinstance(e, cls)]), timeout, f"{cls.__name__} of {job_id}")

    def request_work(self, worker_id: str, *, draining: bool = False, ttl_ms: int = 30_000,
                     timeout: float = 20.0, warm: tuple[str, ...] = (), model: str = MODEL,
                     fingerprint: str = "") -> Any:
        """Long-poll: ask each partition in turn until one grants a lease or `timeout` passes."""
        deadline = time.monotonic() + timeout
        start = partition_for(worker_id, self.settings.partitions)
        i = 0
        while True:
            rid = self.next_id(f"rw-{worker_id}")
            p = (start + i) % self.settings.partitions
            i += 1
            self.send(c.RequestWork(rid, worker_id, GPU, (model,), warm, draining, ttl_ms, int(time.time() * 1000),
                                    fingerprint), partition=p)
            answer = self.wait_for(lambda: self.answers.get(rid), max(0.5, deadline - time.monotonic()),
                                   f"answer to {rid}")
            if isinstance(answer, ev.WorkAssigned) or draining or time.monotonic() > deadline:
                return answer

    def deadletters(self) -> list[dict]:
        cons = self._consumer(commands_deadletter_topic(self.settings))
        out = []
        try:
            for msg in cons.consume(100, 2.0):
                if not msg.error():
                    out.append(self.codec.decode(msg.value())[1])
        finally:
            cons.close()
        return out

    def close(self) -> None:
        self._ec.close()
        self._ac.close()
        self._rc.close()


def rewind_commits(settings: Settings, partition: int, offset: int, timeout: float = 60.0) -> None:
    """Set the scheduler group's committed offset of a commands partition back to `offset`, as if the
    scheduler had processed everything after it but died before committing. Retries until the group is
    empty (a kill -9'd member stays in it until its session times out)."""
    from confluent_kafka import KafkaException

    from spotreel.platform.topics import scheduler_app_id

    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": scheduler_app_id(settings),
                     "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                cons.commit(offsets=[TopicPartition(commands_topic(settings), partition, offset)],
                            asynchronous=False)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        cons.close()


def scheduler_settings(unique: str, partitions: int = 3) -> Settings:
    return replace(Settings.from_env(), topic_prefix=f"test.{unique}", partitions=partitions)


def make_topics(settings: Settings) -> None:
    ensure_scheduler_topics(settings)


def drop_topics(settings: Settings) -> None:
    delete_topics(settings)


@contextmanager
def teardown(settings: Settings, procs: list[SchedulerProc], bus: Bus, tail: int = 3000) -> Iterator[None]:
    """The end of a test that runs scheduler processes: on a failure, the last `tail` characters of every
    process's log; in any case the bus closed, every process stopped (a list the block may add to, e.g. the
    replacement of a killed one) and the run's topics dropped."""
    try:
        yield
    except BaseException:
        for proc in procs:
            print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-tail:]}")
        raise
    finally:
        bus.close()
        for proc in procs:
            proc.stop()
        drop_topics(settings)


@contextmanager
def scheduler_plane(settings: Settings, run_dir: Path, tail: int = 5000) -> Iterator[tuple[SchedulerProc, Bus]]:
    """The run's topics made, one scheduler process that owns every partition, and a bus to it; torn down
    as `teardown` says."""
    make_topics(settings)
    proc = SchedulerProc(settings, run_dir)
    bus = Bus(settings)
    with teardown(settings, [proc], bus, tail):
        proc.wait_owning(set(range(settings.partitions)))
        yield proc, bus
