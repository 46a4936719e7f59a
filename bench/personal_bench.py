"""What sealing personal fields costs (spotreel/personal/; docs/decisions/0035-crypto-shredding.md). Not a test.

    .venv/bin/python bench/personal_bench.py [--commands 4000] [--rounds 5] [--submits 400] [--cassandra]

Three figures, each plain against sealed in the same run, interleaved rounds, best (or pooled) of each:
  scheduler  the real Handler on SubmitJob commands of fresh jobs (decode, decide, evolve, encode the events),
             plain prompts against sealed ones: µs per command and commands/s of one core. The scheduler never
             decrypts; it pays only for the longer fields.
  submit     POST /v1/videos until the 202 through the real gateway app (aiohttp test server, in process) with
             fake sinks and stores, with no vault against a vault on a memory keystore: p50/p99 ms. Measures
             the gateway's sealing work (data key, wrap, three AES-GCM seals, the keyed hash), not Cassandra.
  keystore   (--cassandra) the data key's `INSERT ... IF NOT EXISTS` on the local stack's Cassandra, in a
             keyspace of its own (dropped after): p50/p99 ms, what a real submit adds to that.
Prints one JSON object; `--json PATH` writes it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotreel.codec import Codec  # noqa: E402
from spotreel.domain import commands as c  # noqa: E402
from spotreel.domain import ids  # noqa: E402
from spotreel.domain.spec import RenderSpec  # noqa: E402
from spotreel.personal.fields import seal_record  # noqa: E402
from spotreel.personal.kek import LocalKek  # noqa: E402
from spotreel.personal.keystore import MemoryKeystore, WrappedKey  # noqa: E402
from spotreel.personal.vault import Vault  # noqa: E402
from spotreel.services.scheduler.handler import Handler  # noqa: E402
from spotreel.services.scheduler.partition import PartitionState  # noqa: E402

PROMPT = "a red fox running through fresh snow at dawn, cinematic, 35 mm, shallow depth of field"
NEGATIVE = "blurry, low quality, watermark, text"
CALLBACK = "https://hooks.example.com/spotreel/videos/callback"


@dataclass
class Msg:
    key: bytes
    value: bytes
    offset: int


def records(codec: Codec, vault: Vault | None, n: int, tag: str) -> list[Msg]:
    out = []
    for i in range(n):
        key = f"{tag}-{i}"
        job_id = ids.job_id_for("bench", key)
        cmd = c.SubmitJob(command_id=f"s-{key}", job_id=job_id, tenant="bench", idempotency_key=key,
                          request_hash="h" * 64, gpu_type="cpu", callback_url=CALLBACK,
                          spec=RenderSpec(model="m", prompt=PROMPT, duration_s=2.0, resolution="64x64", fps=8,
                                          seed=1, num_steps=20, negative_prompt=NEGATIVE))
        if vault is not None:
            cmd = seal_record(cmd, vault.sealer_sync(job_id, "bench"))
        out.append(Msg(job_id.encode(), codec.encode_message(cmd), i))
    return out


def scheduler(args: argparse.Namespace, vault: Vault) -> dict[str, Any]:
    codec = Codec.default()
    handler = Handler(codec, 1, lambda _: None)
    best = {"plain": float("inf"), "sealed": float("inf")}
    sizes: dict[str, int] = {}
    for r in range(args.rounds):
        for mode in best:
            msgs = records(codec, vault if mode == "sealed" else None, args.commands, f"{mode}{r}")
            sizes[mode] = len(msgs[0].value)
            part = PartitionState(0)
            now = int(time.time() * 1000)
            t0 = time.process_time()
            for m in msgs:
                handler.handle(part, "cmds", m.offset, m.key, m.value, now, None)
            best[mode] = min(best[mode], (time.process_time() - t0) / len(msgs) * 1e6)
    return {mode: {"us_per_command": round(us, 2), "commands_per_s": round(1e6 / us), "record_bytes": sizes[mode]}
            for mode, us in best.items()} | {"ratio": round(best["sealed"] / best["plain"], 3)}


async def submit(args: argparse.Namespace) -> dict[str, Any]:
    from aiohttp.test_utils import TestClient, TestServer

    from spotreel.services.gateway.app import create_app
    from spotreel.config.settings import Settings
    from tests.unit.gateway_fakes import fake_deps

    clients = {}
    for mode in ("plain", "sealed"):
        vault = Vault(MemoryKeystore(), LocalKek(os.urandom(32))) if mode == "sealed" else None
        # A rate no submission of the bench reaches: admission is the same for both and not what is measured.
        deps = fake_deps(vault=vault)
        from spotreel.api.config import GatewayConfig

        client = TestClient(TestServer(create_app(Settings(webhook_allow_private=1), deps,
                                                  GatewayConfig(default_rate_per_minute=10**9, default_burst=10**9,
                                                                default_max_in_flight=10**8))))
        await client.start_server()
        clients[mode] = client
    lat: dict[str, list[float]] = {"plain": [], "sealed": []}
    body = {"prompt": PROMPT, "negative_prompt": NEGATIVE, "callback_url": CALLBACK}
    headers = {"Authorization": "Bearer key-a"}
    try:
        for r in range(args.rounds + 1):  # the first round warms both up and is not counted
            for mode, client in clients.items():
                for i in range(args.submits):
                    t0 = time.perf_counter()
                    resp = await client.post("/v1/videos", json=body,
                                             headers={**headers, "Idempotency-Key": f"{mode}-{r}-{i}"})
                    await resp.read()
                    assert resp.status == 202, await resp.text()
                    if r:
                        lat[mode].append((time.perf_counter() - t0) * 1000)
    finally:
        for client in clients.values():
            await client.close()
    out: dict[str, Any] = {}
    for mode, xs in lat.items():
        q = statistics.quantiles(xs, n=100)
        out[mode] = {"p50_ms": round(statistics.median(xs), 3), "p99_ms": round(q[98], 3), "n": len(xs)}
    out["p99_ratio"] = round(out["sealed"]["p99_ms"] / out["plain"]["p99_ms"], 3)
    return out


def keystore(args: argparse.Namespace) -> dict[str, Any]:
    from spotreel.personal.keystore import CassandraKeystore
    from spotreel.platform.cql import cql_session
    from spotreel.platform.migrate import migrate
    from spotreel.config.settings import Settings

    settings = Settings.from_env()
    ks = "bench_keys_" + uuid.uuid4().hex[:8]
    kek = LocalKek(os.urandom(32))
    with cql_session(settings) as session:
        try:
            migrate(session, ks, say=lambda *_: None)
            session.set_keyspace(ks)
            store = CassandraKeystore(session)
            xs = []
            for i in range(args.submits):
                key_id = f"j{uuid.uuid4().hex}"
                t0 = time.perf_counter()
                store.put_if_absent(WrappedKey(key_id, "bench", kek.kek_id, kek.wrap(os.urandom(32), key_id)))
                xs.append((time.perf_counter() - t0) * 1000)
        finally:
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    q = statistics.quantiles(xs[10:], n=100)
    return {"put_if_absent_p50_ms": round(statistics.median(xs[10:]), 3), "put_if_absent_p99_ms": round(q[98], 3),
            "n": len(xs) - 10}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--submits", type=int, default=400)
    ap.add_argument("--cassandra", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    vault = Vault(MemoryKeystore(), LocalKek(os.urandom(32)))
    out: dict[str, Any] = {"scheduler": scheduler(args, vault), "submit": asyncio.run(submit(args))}
    if args.cassandra:
        out["keystore"] = keystore(args)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
