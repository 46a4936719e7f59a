"""Moving parts of the whole-system chaos test: a fleet of real `spotreel worker` processes, a client that
keeps submitting through the public API whatever is down, a webhook receiver, and readers of the events
topic. Everything talks to a private stack (tests/harness/private_stack.py)."""

from __future__ import annotations

import hashlib
import http.server
import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.codec import Codec
from spotreel.platform.topics import events_topic
from spotreel.webhooks import signing
from spotreel.config.settings import Settings
from tests.harness.private_stack import PrivateStack
from tests.integration.workerkit import GPU, WorkerProc

MODEL = "tiny-t2v"
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "dead_lettered"})


# -- workers ----------------------------------------------------------------------------------------------

@dataclass
class PlaneView:
    """What workerkit.WorkerProc needs of a control plane, here the private stack's."""

    stack: PrivateStack
    tmp: Path
    worker_key: str
    model_dir: Path

    @property
    def gateway_url(self) -> str:
        return self.stack.settings.gateway_url

    def env(self) -> dict[str, str]:
        return self.stack.env


class Fleet:
    """Workers of one pool; each lost one is replaced by a new process, as a spot fleet would."""

    def __init__(self, plane: PlaneView, extra: tuple[str, ...]) -> None:
        self.plane = plane
        self.extra = extra
        self.workers: list[WorkerProc] = []
        self.started = 0

    def start(self, transport: str) -> WorkerProc:
        self.started += 1
        w = WorkerProc(self.plane, f"w{self.started}{transport[0]}", MODEL, transport, self.extra)
        w.transport = transport  # type: ignore[attr-defined]
        self.workers.append(w)
        return w

    def alive(self) -> list[WorkerProc]:
        return [w for w in self.workers if w.proc.poll() is None]

    def busy(self, min_step: int = 1) -> list[tuple[WorkerProc, str, int, int]]:
        """(worker, job, epoch, step) of live workers in the middle of a lease, at `min_step` or later."""
        out = []
        for w in self.alive():
            current = None
            for line in w.lines():
                kind = line.get("event")
                if kind == "leased":
                    current = (line["job_id"], line["epoch"], -1)
                elif kind == "step" and current and line["job_id"] == current[0]:
                    current = (current[0], current[1], line["step"])
                elif kind == "job":
                    current = None
            if current and current[2] >= min_step:
                out.append((w, *current))
        return out

    def outcomes(self) -> list[dict[str, Any]]:
        return [o for w in self.workers for o in w.outcomes()]

    def stop_all(self) -> None:
        for w in self.workers:
            w.stop()


def wait_until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.2,
               on_timeout: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{on_timeout()}")
        time.sleep(every)


# -- the public API ---------------------------------------------------------------------------------------

def api(url: str, key: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
        timeout: float = 15.0) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body or raw bytes, headers); a connection failure is status 0."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method, headers={
        "Authorization": f"Bearer {key}", **({"Content-Type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status, hdrs = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, hdrs = exc.read(), exc.code, dict(exc.headers)
    except (urllib.error.URLError, OSError):
        return 0, None, {}
    try:
        return status, json.loads(raw) if raw else {}, hdrs
    except ValueError:
        return status, raw, hdrs


@dataclass(frozen=True)
class Order:
    tenant: str
    api_key: str
    idempotency_key: str
    body: dict[str, Any]


@dataclass
class Accepted:
    order: Order
    job_id: str
    tries: int
    at: float


class Submitter(threading.Thread):
    """Submits `orders` through the gateway as the test allows (`allow(n)`), in order. Each order is retried
    under its Idempotency-Key until a 202 whatever is down (the gateway dead, Kafka or Cassandra
    restarting): a retry can only return the same job. A 4xx other than 429 is recorded as refused."""

    def __init__(self, url: str, orders: list[Order], give_up_s: float = 300.0) -> None:
        super().__init__(name="submitter", daemon=True)
        self.url = url
        self.orders = orders
        self.give_up_s = give_up_s
        self.accepted: list[Accepted] = []
        self.refused: list[str] = []
        self.retries = 0
        self.stop = threading.Event()
        self._allowed = 0
        self._cond = threading.Condition()

    def allow(self, n: int) -> None:
        with self._cond:
            self._allowed = min(len(self.orders), self._allowed + max(0, n))
            self._cond.notify_all()

    @property
    def allowed(self) -> int:
        with self._cond:
            return self._allowed

    def settled(self) -> bool:
        """Every allowed order has an answer (accepted or refused)."""
        with self._cond:
            return len(self.accepted) + len(self.refused) >= self._allowed

    def run(self) -> None:
        for i, order in enumerate(self.orders):
            with self._cond:
                while self._allowed <= i and not self.stop.is_set():
                    self._cond.wait(0.5)
            if self.stop.is_set():
                return
            self._submit(order)

    def _submit(self, order: Order) -> None:
        deadline = time.monotonic() + self.give_up_s
        tries = 0
        while not self.stop.is_set():
            tries += 1
            status, body, _ = api(self.url, order.api_key, "POST", "/v1/videos", order.body,
                                  {"Idempotency-Key": order.idempotency_key})
            if status == 202:
                with self._cond:
                    self.accepted.append(Accepted(order, body["job_id"], tries, time.monotonic()))
                return
            if (400 <= status < 500 and status != 429) or time.monotonic() > deadline:
                with self._cond:
                    self.refused.append(f"{order.idempotency_key}: {status} {body}")
                return
            with self._cond:
                self.retries += 1
            self.stop.wait(0.5)

    def jobs(self) -> dict[str, Accepted]:
        with self._cond:
            return {a.job_id: a for a in self.accepted}


def request_of(body: dict[str, Any]) -> tuple:
    """What decides the frames: the reference render is shared by every job with the same tuple."""
    return (body["prompt"], body["seed"], body["num_steps"], body["resolution"], body["duration"], body["fps"])


def orders(rng: random.Random, tenants: dict[str, str], n: int, requests: list[dict[str, Any]],
           callback_url: str) -> list[Order]:
    names = sorted(tenants)
    out = []
    for i in range(n):
        tenant = names[i % len(names)]
        body = {**rng.choice(requests), "model": MODEL, "gpu_type": GPU, "callback_url": callback_url,
                "priority": rng.randint(0, 3)}
        out.append(Order(tenant, tenants[tenant], f"chaos-{i}-{uuid.uuid4().hex[:8]}", body))
    return out


# -- webhooks ---------------------------------------------------------------------------------------------

class HookReceiver:
    """Receives the notifier's webhooks on 127.0.0.1 and keeps, per event id, the tenants whose secret
    signed it (checked against each tenant's secret: the receiver does not know the job's tenant)."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self.secrets = secrets  # tenant -> secret
        self.received: list[tuple[str, str, str]] = []  # (event id, event type, signing tenant)
        self.bad: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                event_id = self.headers.get(signing.EVENT_ID_HEADER, "")
                signer = None
                for tenant, secret in owner.secrets.items():
                    try:
                        signing.verify(secret, self.headers, body, int(time.time()))
                        signer = tenant
                    except signing.BadSignature:
                        continue
                if signer is None:
                    owner.bad.append(event_id)
                else:
                    owner.received.append((event_id, self.headers.get(signing.EVENT_TYPE_HEADER, ""), signer))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, name="hooks", daemon=True)
        self._thread.start()

    def signers(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for event_id, _, tenant in list(self.received):
            out.setdefault(event_id, set()).add(tenant)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- the events topic -------------------------------------------------------------------------------------

def read_events(settings: Settings, codec: Codec | None = None, timeout: float = 60.0) -> list[Any]:
    """Every record of the events topic, decoded, partition by partition in offset order."""
    codec = codec or Codec.default()
    topic = events_topic(settings)
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"audit-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "log_level": 0})
    try:
        ends = {}
        for p in range(settings.partitions):
            low, high = cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = (low, high)
        cons.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        got: dict[int, list[Any]] = {p: [] for p in ends}
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < high - low for p, (low, high) in ends.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read the events topic to its end in {timeout:.0f} s")
            for msg in cons.consume(1000, 0.5):
                if msg.error() is None and msg.offset() < ends[msg.partition()][1]:
                    got[msg.partition()].append(codec.decode_message(msg.value()))
        return [e for p in sorted(got) for e in got[p]]
    finally:
        cons.close()


class EventLog(threading.Thread):
    """Follows the events topic from its start in the background, so any thread can ask what happened to a
    job without polling Kafka itself. Through broker restarts: librdkafka reconnects on its own, but a
    consumer that `assign`ed its partitions can stay silent after the broker comes back (librdkafka issues
    5153 and 4492: no event for minutes after a Kafka restart while the topic holds them). So when nothing arrived for `STALL_S` while a partition's high watermark is past what was
    read, the consumer is replaced by a new one assigned at the next unread offsets (nothing read twice)."""

    STALL_S = 3.0

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        super().__init__(name="event-log", daemon=True)
        self.codec = codec or Codec.default()
        self._kafka = settings.kafka_bootstrap  # not `_bootstrap`: a Thread method
        self._topic = events_topic(settings)
        self._partitions = range(settings.partitions)
        self._next: dict[int, int] = {}  # partition -> the next offset to read
        self._consumer = self._assigned()
        self._events: list[Any] = []
        self._by_job: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self.replaced = 0  # consumers replaced after a stall
        self.start()

    def _assigned(self) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self._kafka, "log_level": 0,
                             "group.id": f"follow-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(self._topic, p, self._next.get(p, OFFSET_BEGINNING)) for p in self._partitions])
        return consumer

    def _behind(self) -> bool:
        try:
            return any(self._consumer.get_watermark_offsets(TopicPartition(self._topic, p), timeout=2.0,
                                                            cached=False)[1] > self._next.get(p, 0)
                       for p in self._partitions)
        except Exception:  # the broker is down: nothing to tell yet
            return False

    def run(self) -> None:
        heard = time.monotonic()
        while not self._halt.is_set():
            messages = self._consumer.consume(500, 0.1)
            for msg in messages:
                if msg.error() is not None:
                    continue
                self._next[msg.partition()] = msg.offset() + 1
                event = self.codec.decode_message(msg.value())
                with self._lock:
                    self._events.append(event)
                    job = getattr(event, "job_id", None)
                    if job is not None:
                        self._by_job.setdefault(job, []).append(event)
            now = time.monotonic()
            if messages:
                heard = now
            elif now - heard > self.STALL_S:
                heard = now
                if self._behind():
                    self._consumer.close()
                    self._consumer = self._assigned()
                    self.replaced += 1
        self._consumer.close()

    def events(self) -> list[Any]:
        with self._lock:
            return list(self._events)

    def job_events(self, job_id: str) -> list[Any]:
        with self._lock:
            return list(self._by_job.get(job_id, ()))

    def ended(self, terminal: tuple[type, ...]) -> set[str]:
        with self._lock:
            return {j for j, es in self._by_job.items() if any(isinstance(e, terminal) for e in es)}

    def close(self) -> None:
        self._halt.set()
        self.join(10)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def download(url: str, key: str, job_id: str, timeout: float = 30.0) -> bytes:
    """GET /content with the tenant's key, then the presigned S3 link it redirects to, without the key
    (S3 refuses a request that carries two authentications)."""
    req = urllib.request.Request(f"{url}/v1/videos/{job_id}/content", headers={"Authorization": f"Bearer {key}"})
    try:
        urllib.request.build_opener(_NoRedirect()).open(req, timeout=timeout)
        raise AssertionError(f"/content of {job_id} did not redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 302, f"/content of {job_id} answered {exc.code}: {exc.read()[:300]!r}"
        location = exc.headers["Location"]
    with urllib.request.urlopen(location, timeout=timeout) as resp:
        return resp.read()


@dataclass
class Tally:
    """What the chaos did and how long the system took to come back, from several threads."""

    kills: dict[str, int] = field(default_factory=dict)
    timings: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, kind: str) -> None:
        with self._lock:
            self.kills[kind] = self.kills.get(kind, 0) + 1

    def time(self, what: str, seconds: float) -> None:
        with self._lock:
            self.timings.setdefault(what, []).append(round(seconds, 1))
