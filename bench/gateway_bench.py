"""Submit acknowledgement latency of the gateway, against a bare aiohttp handler, in the same run.

    .venv/bin/python bench/gateway_bench.py [--rate 50] [--seconds 10] [--rounds 2] [--json out.json]

Two servers on 127.0.0.1, each its own process, on a private topic prefix and keyspace of the running
local stack (Kafka + Cassandra; no scheduler or projector needed):
  gateway  `spotreel gateway`: auth (cached), validation, Idempotency-Key claim (Cassandra LWT), admission,
           placeholder row, SubmitJob produced and awaited (acks=all), 202;
  bare     an aiohttp handler that parses the JSON body and produces a SubmitJob of the same shape with the
           same producer (KafkaCommandSink: idempotent, acks=all), then answers 202. Nothing else.
The load is open-loop at a fixed rate (each request's latency counts from its scheduled send time, so a
slow server cannot slow the load down and hide its own queueing), alternating servers round by round so
both see the same machine. Reported: p50 / p99 / max per server and the gateway/bare ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
BODY = {"prompt": "a red fox running through fresh snow, golden hour", "duration": 2, "fps": 8}


# -- the bare server (run as a subprocess: `gateway_bench.py --serve-bare PORT`) ---------------------------

def serve_bare(port: int) -> None:
    from aiohttp import web

    from spotreel.domain import ids
    from spotreel.domain.commands import SubmitJob
    from spotreel.domain.spec import RenderSpec
    from spotreel.dispatch.sender import AsyncCommandSender as KafkaCommandSink
    from spotreel.config.settings import Settings

    settings = Settings.from_env()
    sink = KafkaCommandSink(settings)

    async def submit(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        key = request.headers.get("Idempotency-Key", uuid.uuid4().hex)
        job_id = ids.job_id_for("bench", key)
        await sink.send(SubmitJob(
            command_id=uuid.uuid4().hex, job_id=job_id, tenant="bench", idempotency_key=key,
            request_hash=ids.request_hash(body), gpu_type="any",
            spec=RenderSpec(model="tiny-t2v", prompt=body["prompt"], duration_s=float(body["duration"]),
                            resolution="256x256", fps=body["fps"], seed=7, num_steps=20)))
        return web.json_response({"job_id": job_id, "status": "accepted"}, status=202)

    app = web.Application()
    app.router.add_post("/v1/videos", submit)
    app.router.add_get("/healthz", lambda r: web.json_response({"status": "ok"}))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- orchestration ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(settings) -> dict[str, str]:
    from spotreel.devstack.services import settings_env

    return {**os.environ, **settings_env(settings), "PYTHONUNBUFFERED": "1"}


async def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}")
            try:
                async with s.get(url + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} did not become healthy in {timeout}s")


async def _load(url: str, key: str, rate: float, seconds: float) -> tuple[list[float], dict[str, int]]:
    """Open loop: request i is due at start + i/rate; latency is measured from that due time."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    n = int(rate * seconds)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        start = time.perf_counter() + 0.05

        async def one(i: int) -> None:
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": f"bench-{uuid.uuid4().hex}"}
            try:
                async with s.post(url + "/v1/videos", json=BODY, headers=headers) as r:
                    await r.read()
                    if r.status != 202:
                        errors[str(r.status)] = errors.get(str(r.status), 0) + 1
                        return
            except aiohttp.ClientError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            latencies.append(time.perf_counter() - due)

        await asyncio.gather(*(one(i) for i in range(n)))
    return latencies, errors


def _pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)] if xs else float("nan")


async def _main(args: argparse.Namespace) -> dict:
    from cassandra.cluster import Cluster

    from spotreel.adapters.kafka import delete_topics
    from spotreel.platform.migrate import migrate
    from spotreel.platform.topics import ensure_topics
    from spotreel.tenancy import create_tenant
    from spotreel.config.settings import Settings

    unique = "bench" + uuid.uuid4().hex[:10]
    settings = replace(Settings.from_env(), topic_prefix=f"bench.{unique}", cassandra_keyspace=unique)
    ensure_topics(settings, say=lambda *a, **k: None)
    cluster = Cluster([settings.host], port=settings.cassandra_port, protocol_version=5)
    session = cluster.connect()
    migrate(session, unique, say=lambda *_: None)
    session.set_keyspace(unique)
    key = create_tenant(session, "bench", rate_per_minute=10_000_000, max_in_flight=10_000_000)

    ports = {"gateway": _free_port(), "bare": _free_port()}
    env = _env(settings)
    procs = {
        "gateway": subprocess.Popen([sys.executable, "-m", "spotreel.cli", "gateway", "--port", str(ports["gateway"])],
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        "bare": subprocess.Popen([sys.executable, __file__, "--serve-bare", str(ports["bare"])], cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    }
    results: dict[str, dict] = {}
    try:
        for name, proc in procs.items():
            await _wait_healthy(f"http://127.0.0.1:{ports[name]}", proc)
        got: dict[str, list[float]] = {"gateway": [], "bare": []}
        errors: dict[str, dict[str, int]] = {"gateway": {}, "bare": {}}
        for name in procs:  # warm-up: connections, prepared statements, producer metadata
            await _load(f"http://127.0.0.1:{ports[name]}", key, args.rate, args.warmup)
        for _ in range(args.rounds):
            for name in ("bare", "gateway"):
                lat, err = await _load(f"http://127.0.0.1:{ports[name]}", key, args.rate, args.seconds)
                got[name] += lat
                for k, v in err.items():
                    errors[name][k] = errors[name].get(k, 0) + v
        for name, lat in got.items():
            results[name] = {"requests": len(lat) + sum(errors[name].values()), "errors": errors[name],
                             "p50_ms": _pct(lat, 50) * 1000, "p99_ms": _pct(lat, 99) * 1000,
                             "max_ms": max(lat) * 1000 if lat else float("nan")}
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        session.execute(f"DROP KEYSPACE IF EXISTS {unique}")
        cluster.shutdown()
        delete_topics(settings)
    g, b = results["gateway"], results["bare"]
    return {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                       f"load average {os.getloadavg()[0]:.1f}",
            "rate_per_s": args.rate, "seconds_per_round": args.seconds, "rounds": args.rounds, **{
                f"{k}_{m}": v for k, r in results.items() for m, v in r.items()},
            "ratio_p50": g["p50_ms"] / b["p50_ms"], "ratio_p99": g["p99_ms"] / b["p99_ms"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=50.0, help="requests per second (open loop)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per round and server")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--serve-bare", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_bare is not None:
        serve_bare(args.serve_bare)
        return
    out = asyncio.run(_main(args))
    print(f"machine: {out['machine']}; {out['rate_per_s']:.0f} submits/s, {out['rounds']} x {out['seconds_per_round']:.0f} s")
    for name in ("bare", "gateway"):
        print(f"{name:8s} requests {out[f'{name}_requests']:5d}  errors {out[f'{name}_errors'] or 0}  "
              f"p50 {out[f'{name}_p50_ms']:7.1f} ms  p99 {out[f'{name}_p99_ms']:7.1f} ms  max {out[f'{name}_max_ms']:7.1f} ms")
    print(f"gateway / bare: p50 x{out['ratio_p50']:.2f}, p99 x{out['ratio_p99']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
