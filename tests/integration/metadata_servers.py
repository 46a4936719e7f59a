"""Small metadata servers for the GCP and Azure notice readers, because neither cloud ships an emulator of
its instance metadata service. Each speaks the documented protocol the reader relies on, on 127.0.0.1, in a
thread of its own (the readers are synchronous):

- GcpMetadata: /computeMetadata/v1/instance/preempted, refused (403) without `Metadata-Flavor: Google`;
  its value with an ETag; `?wait_for_change=true` hangs until the value changes or `timeout_sec` passes,
  and answers at once when `last_etag` is not the current ETag.
- AzureMetadata: /metadata/scheduledevents?api-version=2020-07-01, refused (400) without `Metadata: true`;
  the events document with its DocumentIncarnation; a POST of StartRequests approves events (they leave the
  document, the incarnation goes up); /metadata/instance/compute/name answers the VM's name.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from typing import Any

from aiohttp import web

from spotreel.platform.ports import free_port


class ThreadedServer:
    """An aiohttp app on 127.0.0.1:<free port>, its loop on a daemon thread."""

    def __init__(self) -> None:
        self.port = free_port("127.0.0.1")
        self.requests: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        raise NotImplementedError

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._runner = web.AppRunner(self.app())
        self.loop.run_until_complete(self._runner.setup())
        self.loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self.loop.run_forever()

    def call(self, fn, *args: Any) -> None:
        """Run `fn(*args)` on the server's loop (state changes from the test's thread)."""
        done = threading.Event()

        def run() -> None:
            fn(*args)
            done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(5)

    def __enter__(self):
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        async def close() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    def record(self, request: web.Request) -> None:
        self.requests.append({"method": request.method, "path": request.path, "query": dict(request.query),
                              "headers": dict(request.headers)})


class GcpMetadata(ThreadedServer):
    def __init__(self) -> None:
        super().__init__()
        self.preempted = False
        self.version = 0
        self._changed: asyncio.Event | None = None

    def etag(self) -> str:
        return hashlib.sha1(f"{self.preempted}:{self.version}".encode()).hexdigest()[:16]

    def set_preempted(self, value: bool) -> None:
        def flip() -> None:
            self.preempted, self.version = value, self.version + 1
            assert self._changed is not None
            self._changed.set()
            self._changed = asyncio.Event()

        self.call(flip)

    def app(self) -> web.Application:
        self._changed = asyncio.Event()
        app = web.Application()
        app.router.add_get("/computeMetadata/v1/instance/preempted", self.preempted_value)
        return app

    async def preempted_value(self, request: web.Request) -> web.Response:
        self.record(request)
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        if request.query.get("wait_for_change") == "true" and request.query.get("last_etag") in (None, self.etag()):
            changed = self._changed
            assert changed is not None
            try:
                await asyncio.wait_for(changed.wait(), float(request.query.get("timeout_sec", "3600")))
            except asyncio.TimeoutError:
                pass
        return web.Response(text="TRUE" if self.preempted else "FALSE", headers={"ETag": self.etag()})


class AzureMetadata(ThreadedServer):
    def __init__(self, vm_name: str = "vm-1") -> None:
        super().__init__()
        self.vm_name = vm_name
        self.incarnation = 1
        self.events: list[dict[str, Any]] = []
        self.approved: list[str] = []

    def schedule(self, event: dict[str, Any]) -> None:
        def add() -> None:
            self.events.append(event)
            self.incarnation += 1

        self.call(add)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metadata/scheduledevents", self.document)
        app.router.add_post("/metadata/scheduledevents", self.start_requests)
        app.router.add_get("/metadata/instance/compute/name", self.name)
        return app

    def _refused(self, request: web.Request) -> web.Response | None:
        self.record(request)
        if request.headers.get("Metadata") != "true":
            return web.json_response({"error": "Bad request. Required metadata header not specified"}, status=400)
        if not request.query.get("api-version"):
            return web.json_response({"error": "Bad request. api-version was not specified"}, status=400)
        return None

    async def document(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        return refused or web.json_response({"DocumentIncarnation": self.incarnation, "Events": self.events})

    async def start_requests(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused:
            return refused
        body = json.loads(await request.text())
        ids = [r["EventId"] for r in body.get("StartRequests", [])]
        self.approved.extend(ids)
        self.events = [e for e in self.events if e["EventId"] not in ids]
        self.incarnation += 1
        return web.Response(status=200)

    async def name(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        return refused or web.Response(text=self.vm_name)
