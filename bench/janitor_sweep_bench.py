"""How long one janitor sweep pass takes per stored job prefix (services/janitor/sweep.py), against the
running stack's real SeaweedFS and Cassandra: the figure that says how many stored videos one pass can
cover in its interval.

A scratch bucket gets N video prefixes (one small object each) and N checkpoint prefixes, a scratch
keyspace (all migrations) gets their jobs_by_id rows and two tenants; one pass runs with a clock at which
nothing is due (listing + one read per prefix), a second at which every video and checkpoint set is due
(plus the deletes). Everything scratch is dropped afterwards.

Run: .venv/bin/python bench/janitor_sweep_bench.py --jobs 1000
"""

from __future__ import annotations

import argparse
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from cassandra.cluster import Cluster

from spotreel.platform.migrate import migrate
from spotreel.devstack.seaweed import s3_client
from spotreel.services.janitor import objects
from spotreel.services.janitor.service import ReadModelFacts
from spotreel.services.janitor.sweep import sweep
from spotreel.config.settings import Settings

DAY_MS = 86_400_000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    settings = Settings.from_env()
    s3 = s3_client(settings, timeout=30.0)
    name = f"bench{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    cluster = Cluster([settings.host], port=settings.cassandra_port, protocol_version=5)
    session = cluster.connect()
    session.execute(f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', "
                    "'replication_factor': 1}")
    session.set_keyspace(name)
    try:
        migrate(session, name, say=lambda *_: None)
        now = int(time.time() * 1000)
        session.execute("INSERT INTO tenants (tenant_id, plan) VALUES ('tfree', 'free')")
        insert = session.prepare("INSERT INTO jobs_by_id (job_id, tenant_id, status, updated_at) VALUES (?, ?, ?, ?)")
        jobs = [f"j{i:08d}" for i in range(args.jobs)]

        def put(job: str) -> None:
            s3.put_object(Bucket=name, Key=f"videos/{job}/e00000001/video.mp4", Body=b"v")
            s3.put_object(Bucket=name, Key=f"ckpt/{job}/e00000001/s000001.ckpt", Body=b"c")
            session.execute(insert, (job, "tfree", "succeeded" if int(job[1:]) % 2 else "failed", now))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, jobs))
        facts = ReadModelFacts(session)
        for label, at in (("nothing due", now - 1), ("everything due", now + 8 * DAY_MS)):
            started = time.perf_counter()
            got = sweep(s3, name, name, facts.job, facts.plan_of, 86_400, at)
            took = time.perf_counter() - started
            print(f"{label}: {got.jobs_seen} prefixes in {took:.2f} s = {got.jobs_seen / took:,.0f} prefixes/s; "
                  f"{got.objects_deleted} objects deleted")
    finally:
        objects.delete_keys(s3, name, list(objects.keys_under(s3, name, "")))
        s3.delete_bucket(Bucket=name)
        session.execute(f"DROP KEYSPACE IF EXISTS {name}")
        cluster.shutdown()


if __name__ == "__main__":
    main()
