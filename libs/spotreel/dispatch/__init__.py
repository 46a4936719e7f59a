"""Dispatch: how a worker's requests reach the scheduler and its answers come back, over Kafka.

One library for every party that speaks the worker protocol to the scheduler over Kafka: the gateway's
worker API (on behalf of HTTP workers), the Kafka worker transport (workers inside the platform) and the
fleet simulator's Kafka transport. They share these three things, so one protocol has one implementation:

- `order.py`: where a RequestWork goes (partitions whose pool stats show queued work, then a ring from the
  worker's own partition);
- `listener.py`: one consumer thread that reads answers (`<prefix>.assignments`), verdicts and instructions
  (`<prefix>.events`) and pool stats, and routes each record to whoever waits for it;
- `verdicts.py`: what a verdict tells a lease holder (accepted / rejected / pending, cancel, drain, expiry,
  and how long to stay quiet when the control plane is behind);
- `aio.py`: the same for asyncio callers (the gateway, the simulator), and `sender.py`, commands produced
  and awaited until the broker acknowledged them.
"""
