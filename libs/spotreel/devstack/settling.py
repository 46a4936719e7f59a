"""A setup step (topics, schema) retried while a cluster settles after a node came back.

Just after a broker or a Cassandra node restarts, the first requests of `infra up`'s idempotent setup can fail for
reasons that pass within seconds: a broker handle the client destroys while the broker's address is re-learned
(`_DESTROY_BROKER`), no leader yet for a partition, a quorum read that times out while the returning node is
still replaying its commit log (`ReadTimeout ... received only 1 responses`), a replica without a new table's schema yet (`INCOMPATIBLE_SCHEMA`). Every setup step is idempotent,
so such a failure is tried again for a bounded time; any other failure, and a transient one that outlasts the
window, ends the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Cassandra driver exceptions that mean "not settled yet", by class name (the driver's hierarchy mixes them with
# errors that will not pass, and the class names are stable across its versions).
CQL_TRANSIENT = frozenset({"ReadTimeout", "WriteTimeout", "OperationTimedOut", "Unavailable", "NoHostAvailable",
                           "ReadFailure", "WriteFailure", "ConnectionException", "ConnectionShutdown"})
# librdkafka's codes for a broker or leader that is not there yet (the names of confluent_kafka.KafkaError).
KAFKA_TRANSIENT = frozenset({"_DESTROY_BROKER", "_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_MSG_TIMED_OUT",
                             "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "NOT_CONTROLLER",
                             "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS",
                             "COORDINATOR_NOT_AVAILABLE"})


def kafka_code(exc: BaseException) -> str | None:
    """The librdkafka error name a KafkaException carries, else None."""
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return name() if callable(name) else None


def transient(exc: BaseException) -> bool:
    """Whether a setup step's failure is one a settling cluster stops giving within seconds."""
    if "INCOMPATIBLE_SCHEMA" in str(exc):
        return True
    if type(exc).__name__ in CQL_TRANSIENT:
        return True
    code = kafka_code(exc)
    if code is not None:
        err = exc.args[0]
        return code in KAFKA_TRANSIENT or bool(getattr(err, "retriable", lambda: False)())
    return False


def settled(step: Callable[[], T], what: str, say: Callable[[str], None], window_s: float = 60.0,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """`step()`, tried again after a transient failure (backing off 1, 2, 4, 5, 5 ... s) until `window_s` passed."""
    deadline = clock() + window_s
    pause = 1.0
    while True:
        try:
            return step()
        except Exception as exc:
            if not transient(exc) or clock() + pause > deadline:
                raise
            say(f"{what}: the cluster is still settling ({type(exc).__name__}: {str(exc)[:120]}); "
                f"trying again in {pause:.0f} s")
            sleep(pause)
            pause = min(pause * 2, 5.0)
