"""The floor of one worker message over Kafka on this machine (not a test).

A worker's renewal over the Kafka transport is at least: a record produced by the worker, fetched by the
scheduler, one answer produced, and that answer fetched by the worker. This benchmark measures what exactly
that and nothing else costs in CPU, summed over the processes that do it, at a given message rate:

  - a client process plays `--workers` workers, each sending one small record (keyed by worker, 200 bytes,
    about an Avro RenewLease) at a fixed total `--rate`, and reads the answers (round trip from a send stamp);
  - an echo process consumes the requests and produces each one back as the answer (no decoding, no state);
  - the broker of the running local stack (`spotreel infra up`) carries both topics (6 partitions each).

The figures: CPU-ms per message of the client, the echo, the broker (its idle CPU measured just before,
taken off) and their sum, and the round trip p50/p99. Both clients are confluent-kafka (librdkafka, C) with
the settings the spotreel transports use (linger 1-2 ms, acks=all, idempotent), so the floor is what a
Python process pays per record over Kafka at best; spotreel's own cost per worker message (the `spotreel
simulate --transport kafka` figure in bench/README.md) is compared with it as a ratio.

    .venv/bin/python bench/kafka_floor.py --rate 550 --seconds 60 [--workers 4000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARTITIONS = 6
PAYLOAD = 200


def _producer(extra: dict | None = None):
    from confluent_kafka import Producer

    from spotreel.config.settings import Settings

    return Producer({"bootstrap.servers": Settings().kafka_bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 1, **(extra or {})})


def _consumer(group: str, topic: str):
    from confluent_kafka import Consumer

    from spotreel.config.settings import Settings

    cons = Consumer({"bootstrap.servers": Settings().kafka_bootstrap, "group.id": group,
                     "auto.offset.reset": "latest", "enable.auto.commit": True, "fetch.wait.max.ms": 5})
    cons.subscribe([topic])
    return cons


def echo(req: str, rep: str) -> None:
    """Consume requests, produce each back on the answers topic under the same key (the scheduler's least)."""
    prod, cons = _producer(), _consumer(f"floor-echo-{uuid.uuid4().hex[:6]}", req)
    ready = False
    while True:
        msgs = cons.consume(500, 0.05)
        if not ready and cons.assignment():
            ready = True
            print("ready", flush=True)
        for m in msgs:
            if m.error() is None:
                prod.produce(rep, m.value(), m.key())
        prod.poll(0)


def client(req: str, rep: str, rate: float, seconds: float, workers: int) -> None:
    """Send at `rate` for `seconds`, keyed over `workers`, and time each answer; print the figures as JSON."""
    prod, cons = _producer(), _consumer(f"floor-client-{uuid.uuid4().hex[:6]}", rep)
    while not cons.assignment():
        cons.consume(10, 0.1)
    rtts: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for m in cons.consume(500, 0.05):
                if m.error() is None:
                    rtts.append(time.monotonic() - float(m.value()[:20].decode()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    rng = random.Random(1)
    pad = b"x" * (PAYLOAD - 20)
    t0 = time.monotonic()
    n = 0
    while True:
        due = t0 + n / rate
        now = time.monotonic()
        if due - t0 >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        key = f"w{rng.randrange(workers)}".encode()
        prod.produce(req, f"{time.monotonic():<20.6f}".encode() + pad, key)
        prod.poll(0)
        n += 1
    prod.flush(30)
    time.sleep(2.0)
    stop.set()
    reader.join(5)
    rtts.sort()
    pick = (lambda q: round(rtts[min(len(rtts) - 1, int(q * len(rtts)))] * 1000, 2)) if rtts else (lambda q: None)
    print(json.dumps({"sent": n, "answered": len(rtts), "rtt_p50_ms": pick(0.5), "rtt_p99_ms": pick(0.99)}),
          flush=True)


def broker_pid() -> int:
    """The pid of the local stack's Kafka broker (bench/fetch_cost.py uses it too)."""
    from spotreel.devstack.stack import components
    from spotreel.config.settings import Settings

    for server in components(Settings()):
        if server.name == "kafka":
            running = server.running()
            if running is not None:
                return running.pid
    raise SystemExit("the local stack's Kafka is not running: `.venv/bin/spotreel infra up`")


def measure(rate: float, seconds: float, workers: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from spotreel.services.simulator.stack import cpu_seconds
    from spotreel.config.settings import Settings

    tag = uuid.uuid4().hex[:8]
    req, rep = f"floor-{tag}.req", f"floor-{tag}.rep"
    admin = AdminClient({"bootstrap.servers": Settings().kafka_bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (req, rep)]).values():
        f.result(30)
    broker = broker_pid()
    me = [sys.executable, str(Path(__file__).resolve())]
    echo_p = subprocess.Popen([*me, "--echo", req, rep], stdout=subprocess.PIPE, text=True)
    try:
        assert echo_p.stdout is not None and echo_p.stdout.readline().strip() == "ready"
        # The broker's own CPU with these topics idle, to take off.
        b0, t0 = cpu_seconds(broker), time.monotonic()
        time.sleep(10.0)
        idle_broker = ((cpu_seconds(broker) or 0) - (b0 or 0)) / (time.monotonic() - t0)
        client_p = subprocess.Popen([*me, "--client", req, rep, str(rate), str(seconds), str(workers)],
                                    stdout=subprocess.PIPE, text=True)
        time.sleep(3.0)  # the client's own start (imports, assignment) is not counted
        pids = {"client": client_p.pid, "echo": echo_p.pid, "broker": broker}
        before, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
        window = max(1.0, seconds - 4.0)
        time.sleep(window)
        dt = time.monotonic() - t0
        used = {k: ((cpu_seconds(p) or 0) - (before[k] or 0)) / dt for k, p in pids.items()}
        out, _ = client_p.communicate(timeout=seconds + 60)
        figures = json.loads(out.strip().splitlines()[-1])
    finally:
        echo_p.kill()
        echo_p.wait()
        for f in admin.delete_topics([req, rep]).values():
            try:
                f.result(30)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
    used["broker"] = max(0.0, used["broker"] - idle_broker)
    per_msg = {k: round(v / rate * 1000, 3) for k, v in used.items()}
    return {"rate_per_s": rate, "workers": workers, "seconds": seconds,
            "cores": {k: round(v, 3) for k, v in used.items()}, "broker_idle_cores": round(idle_broker, 3),
            "cpu_ms_per_message": per_msg, "cpu_ms_per_message_total": round(sum(per_msg.values()), 3), **figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--echo", nargs=2, metavar=("REQ", "REP"), help=argparse.SUPPRESS)
    ap.add_argument("--client", nargs=5, metavar=("REQ", "REP", "RATE", "SECONDS", "WORKERS"), help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=550.0, help="messages per second, all workers together")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=4000, help="distinct keys the messages are spread over")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.echo:
        echo(*args.echo)
        return
    if args.client:
        req, rep, rate, seconds, workers = args.client
        client(req, rep, float(rate), float(seconds), int(workers))
        return
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
              **measure(args.rate, args.seconds, args.workers)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
