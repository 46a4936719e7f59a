"""What became of every lease of a run, from its events topic: did a worker ever act on it, and if not, how
it ended (expired after its TTL, released as unclaimed by the gateway, still held when the run stopped).

Used on the topics of `spotreel simulate --keep` (prefix `sim.<run id>`) to count orphaned leases: granted,
never acted on by any worker, freed only by the lease timer. Run:

    .venv/bin/python bench/lease_fate.py --prefix sim.<run id> [--partitions 6] [--drop]

`--drop` deletes the run's topics and keyspace afterwards (what `simulate` does without --keep).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import replace
from statistics import median
from typing import Any

from spotreel.domain import events as ev
from spotreel.config.settings import Settings

ACTED = (ev.LeaseRenewed, ev.ProgressReported, ev.CheckpointRecorded, ev.JobSucceeded, ev.AttemptFailed)


def lease_fate(events: list[Any]) -> dict[str, Any]:
    granted: dict[tuple[str, int], ev.JobLeased] = {}
    acted: set[tuple[str, int]] = set()
    ended: dict[tuple[str, int], Any] = {}
    for e in events:
        key = (getattr(e, "job_id", ""), getattr(e, "epoch", -1))
        if isinstance(e, ev.JobLeased):
            granted[key] = e
        elif isinstance(e, ACTED) or (isinstance(e, ev.LeaseReleased) and e.reason != "unclaimed"):
            acted.add(key)
        if isinstance(e, (ev.LeaseExpired, ev.LeaseReleased, ev.JobSucceeded, ev.AttemptFailed)):
            ended.setdefault(key, e)
    fate: Counter = Counter()
    held_ms: dict[str, list[int]] = {"expired": [], "released_unclaimed": []}
    for key, leased in granted.items():
        if key in acted:
            fate["acted_on"] += 1
            continue
        end = ended.get(key)
        if isinstance(end, ev.LeaseExpired):
            fate["never_acted_expired"] += 1
            held_ms["expired"].append(end.at_ms - leased.at_ms)
        elif isinstance(end, ev.LeaseReleased):
            fate["never_acted_released_unclaimed"] += 1
            held_ms["released_unclaimed"].append(end.at_ms - leased.at_ms)
        else:
            fate["never_acted_still_held_at_end"] += 1
    orphaned = sum(v for k, v in fate.items() if k != "acted_on")
    return {"leases": len(granted), **dict(sorted(fate.items())), "never_acted": orphaned,
            "never_acted_share": round(orphaned / len(granted), 3) if granted else None,
            "median_ms_granted_to_freed": {k: median(v) if v else None for k, v in held_ms.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, help="topic prefix of the run, e.g. sim.90980a9f2f")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--drop", action="store_true", help="delete the run's topics and keyspace afterwards")
    args = ap.parse_args()
    settings = replace(Settings.from_env(), topic_prefix=args.prefix, partitions=args.partitions,
                       cassandra_keyspace=args.prefix.replace(".", "_"))
    from spotreel.services.simulator.stack import read_events

    print(json.dumps(lease_fate(read_events(settings)), indent=2))
    if args.drop:
        from spotreel.adapters.kafka import delete_topics
        from spotreel.platform.cql import cql_session

        delete_topics(settings)
        with cql_session(settings) as session:
            session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra_keyspace}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
