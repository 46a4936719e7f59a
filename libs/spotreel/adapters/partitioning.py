"""One partitioner for every producer: Kafka's murmur2 (the Java client's and aiokafka's default), computed
here and passed as an explicit partition, so a job's commands land on the partition that owns its events
and table rows whichever client (Faust/aiokafka, confluent-kafka, the Java tools) produced them.

confluent-kafka's default is `consistent_random` (crc32), which would scatter a job's commands onto the
wrong owner; never rely on a client's default.
"""

from __future__ import annotations

from functools import lru_cache

# partition_for's memory: murmur2 in Python costs tens of microseconds a key, a cache hit well under one, and
# the same keys come back (a job's every command, a worker's every poll); 65,536 keys are a few MiB.
CACHED_KEYS = 1 << 16


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like the Java client's."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=CACHED_KEYS)
def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition of `key` among `partitions`, exactly as Kafka's default partitioner picks it (remembered
    for the last `CACHED_KEYS` keys: a pure function of its arguments)."""
    raw = key.encode() if isinstance(key, str) else key
    return (murmur2(raw) & 0x7FFFFFFF) % partitions
