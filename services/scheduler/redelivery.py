"""The redelivery window of a commands partition, read on assignment (blocking; run it in a thread).

After a crash, Kafka redelivers every command from the group's committed offset C on. The scheduler's
outputs for those commands may already be durable: events (with their `cmd-offset` header), dead letters
(same header), answers to RequestWork. Events carry the proof that a command was applied (`applied_upto`);
this module finds the rest, so a redelivered command is answered again and never dead-lettered twice:

- `committed_offset`: C, the group's committed offset for the partition (-1 when nothing was committed,
  then every command is redelivered);
- `window_start`: the first record of an output topic's partition whose `cmd-offset` is >= C (records are
  written in command order, so the headers only grow along a partition). The scan goes back from where
  the caller was going to start anyway and stops after `max_records`: a window that large means a commit
  was missed for minutes, and is logged;
- `deadlettered_since`: the command offsets >= C that already have a dead letter.
"""

from __future__ import annotations

import logging

from spotreel.platform.consumers import consumer
from spotreel.adapters.kafka import CMD_ENTRY_HEADER, CMD_OFFSET_HEADER, read_partition

log = logging.getLogger(__name__)

CHUNK = 512


def header_offset(headers: object) -> int | None:
    for k, v in headers or ():  # type: ignore[attr-defined]
        if k == CMD_OFFSET_HEADER:
            return int(v)
    return None


def header_entry(headers: object) -> int | None:
    """A RenewalBatch renewal's place in its batch (`cmd-entry`), None for an event of a whole command."""
    for k, v in headers or ():  # type: ignore[attr-defined]
        if k == CMD_ENTRY_HEADER:
            return int(v)
    return None


def _cmd_offset(msg: object) -> int:
    found = header_offset(msg.headers())  # type: ignore[attr-defined]
    return -1 if found is None else found


def committed_offset(bootstrap: str, group: str, topic: str, partition: int, timeout: float = 10.0) -> int:
    from confluent_kafka import TopicPartition

    # Asking for the committed offset does not join the group (no subscribe), so it cannot disturb it.
    c = consumer(bootstrap, group)
    try:
        tp = c.committed([TopicPartition(topic, partition)], timeout=timeout)[0]
    finally:
        c.close()
    return tp.offset if tp.offset is not None and tp.offset >= 0 else -1


def start_offsets(bootstrap: str, group: str, topic: str, partitions: list[int],
                  timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset or -1, log start offset) of the commands topic."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, group)
    try:
        committed = c.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
        return {tp.partition: (tp.offset if tp.offset is not None and tp.offset >= 0 else -1,
                               c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout)[0])
                for tp in committed}
    finally:
        c.close()


def window_start(bootstrap: str, topic: str, partition: int, committed: int, start: int,
                 max_records: int = 20_000) -> int:
    """The lowest offset <= `start` from which every record has `cmd-offset` >= `committed`."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, "spotreel-reader")
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()
    scanned = 0
    while start > low:
        lo = max(low, start - CHUNK)
        below = [m.offset() for m in read_partition(bootstrap, topic, partition, lo, start)
                 if _cmd_offset(m) < committed]
        if below:
            return max(below) + 1
        scanned += start - lo
        start = lo
        if scanned >= max_records:
            log.warning("%s[%d]: more than %d records since the committed command offset %d; answers to "
                        "RequestWork before offset %d are not re-sent", topic, partition, max_records, committed,
                        start)
            return start
    return start


def deadlettered_since(bootstrap: str, topic: str, partition: int, committed: int) -> set[int]:
    """Command offsets >= `committed` that already have a dead letter on `topic`[`partition`]."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap, "spotreel-reader")
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()
    first = window_start(bootstrap, topic, partition, committed, high)
    return {o for m in read_partition(bootstrap, topic, partition, first, high)
            if (o := header_offset(m.headers())) is not None and o >= committed}
