"""What a Kafka consumer of a steady trickle of records costs the broker, eager or batched (not a test).

librdkafka answers a fetch as soon as one record is there (`fetch.min.bytes` 1) and sends the next at once, so
a consumer of a topic that gets a record every few milliseconds sends a fetch per record or two. This
benchmark produces `--rate` records a second (200 bytes, 6 partitions, linger 2 ms) to a topic of its own on
the local stack's broker and reads them with `--consumers` consumers in each mode, one mode after the other:

  - eager:    librdkafka's defaults;
  - eager10:  fetch.wait.max.ms 10 (what the dispatch listener had);
  - w10:      spotreel.adapters.kafka.batched_fetch(10) (the dispatch listener);
  - w100:     batched_fetch(100) (the projector, the webhook notifier, the scheduler's views).

It prints the broker's CPU and this process's (the consumers' librdkafka threads) in cores, with the same
production and no consumer first (`none`) as the baseline to take off. Run with the stack up and idle.

    .venv/bin/python bench/fetch_cost.py [--rate 400] [--consumers 1] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from typing import Any

from kafka_floor import broker_pid  # bench/, on the path when this runs as a script

from spotreel.adapters.kafka import batched_fetch
from spotreel.services.simulator.stack import cpu_seconds

MODES: dict[str, dict[str, Any]] = {
    "none": {}, "eager": {}, "eager10": {"fetch.wait.max.ms": 10},
    "w10": batched_fetch(10), "w100": batched_fetch(100),
}


def run_mode(mode: str, rate: int, consumers: int, seconds: float, broker: int, bootstrap: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench.fetch-cost.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result()
    stop = threading.Event()
    read = [0] * (consumers if mode != "none" else 0)

    def consume(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                      "enable.auto.commit": False, "log_level": 3, **MODES[mode]})
        c.assign([TopicPartition(topic, p, -1) for p in range(6)])
        while not stop.is_set():
            read[i] += len(c.consume(500, 0.2))
        c.close()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(read))]
    for t in threads:
        t.start()
    time.sleep(3)  # assigned and fetching before the clock starts
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "log_level": 3})
    me = os.getpid()
    k0, m0, t0 = cpu_seconds(broker), cpu_seconds(me), time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate)
        while sent < due:
            producer.produce(topic, value=b"x" * 200, partition=sent % 6)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    k1, m1, t1 = cpu_seconds(broker), cpu_seconds(me), time.monotonic()
    stop.set()
    for t in threads:
        t.join()
    producer.flush(5)
    admin.delete_topics([topic])
    return {"mode": mode, "consumers": len(read), "sent": sent, "read": sum(read),
            "broker_cores": round((k1 - k0) / (t1 - t0), 3), "this_process_cores": round((m1 - m0) / (t1 - t0), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=int, default=400)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from spotreel.config.settings import Settings

    bootstrap = Settings.from_env().kafka_bootstrap
    broker = broker_pid()
    rows = [run_mode(m, args.rate, args.consumers, args.seconds, broker, bootstrap) for m in MODES]
    base = rows[0]
    for r in rows:
        r["broker_cores_per_consumer"] = round((r["broker_cores"] - base["broker_cores"]) / max(1, r["consumers"]), 3)
        r["client_cores_per_consumer"] = round(
            (r["this_process_cores"] - base["this_process_cores"]) / max(1, r["consumers"]), 3)
        print(json.dumps(r), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rate": args.rate, "consumers": args.consumers, "seconds": args.seconds, "rows": rows}, f,
                      indent=2)


if __name__ == "__main__":
    main()
