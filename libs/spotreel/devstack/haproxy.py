"""HAProxy in front of several gateways (Debian's `haproxy` package: apt-get install -y haproxy), on the
gateway's usual address and loopback only, started, probed and stopped like every other component.

Routing (services/gateway/README.md, "Several gateways"):
- `/internal/workers/{id}/...` (register and the lease long-poll) is hashed on that path (`balance uri
  depth 3`, consistent hashing), so a worker's polls reach one gateway while it is up: the gateway that sent
  a worker's RequestWork is the one whose lease desk waits for the answer. When that gateway is down, only
  its workers move (to the others), and move back when it returns.
- everything else (the public API, the fenced lease commands, whose verdicts every gateway reads) goes
  round-robin.
- every gateway is health-checked with GET /healthz each second (down after 2 failures, up after 2
  answers); a connection refused (a gateway killed a moment ago) is retried on another gateway at once
  (`option redispatch`), so a client or worker sees no error for a request that never reached one.
- each answer names the gateway that served it in `X-Spotreel-Gateway`.

Its own state is read from its stats socket (run/haproxy/stats.sock): the probe reports how many gateways
are up and fails while none is, since the address then answers nothing useful.
"""

from __future__ import annotations

import csv
import io
import resource
import shutil
import socket
from pathlib import Path

from spotreel.devstack.render import render as render_template
from spotreel.devstack.render import write_if_changed
from spotreel.devstack.server import Say, Server
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.config.settings import Settings

CHECK_INTER_MS = 1000
# Long polls last up to the gateway's lease_poll_max_seconds (60 s); the server timeout must outlast them.
SERVER_TIMEOUT_S = 120


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or (shutil.which("haproxy", path="/usr/sbin:/sbin"))
    if found is None:
        raise InfraError("haproxy: the `haproxy` binary was not found (needed for gateway replicas > 1)",
                         ["apt-get install -y haproxy (Debian's package, 2.6)"])
    return found


def max_connections(limit: int = 10_000) -> int:
    """HAProxy refuses to start when it cannot raise its file limit to about twice its maxconn."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return limit if hard == resource.RLIM_INFINITY else max(64, min(limit, (hard - 100) // 2))


def render(host: str, port: int, gateways: list[tuple[str, int]], stats_socket: Path) -> str:
    servers = "\n".join(f"    server {name} {host}:{p} check inter {CHECK_INTER_MS} fall 2 rise 2"
                        for name, p in gateways)
    tracked = "\n".join(f"    server {name} {host}:{p} track gateways/{name}" for name, p in gateways)
    return render_template("haproxy.cfg", host=host, port=port, stats_socket=stats_socket, servers=servers,
                           tracked=tracked, server_timeout_s=SERVER_TIMEOUT_S,
                           maxconn=max_connections())


class HAProxy(Server):
    name = "haproxy"
    service = True  # started with the services (it checks the gateways' health itself), stopped before servers

    def __init__(self, settings: Settings, gateways: list[tuple[str, int]]) -> None:
        super().__init__(settings)
        self.gateways = gateways

    def address(self) -> str:
        return self.settings.gateway_url

    def ports(self) -> list[int]:
        return [self.settings.gateway_port]

    def main_log(self) -> Path:
        return self.stdout_log

    @property
    def config_file(self) -> Path:
        return self.conf_dir / "haproxy.cfg"

    @property
    def stats_socket(self) -> Path:
        return self.conf_dir / "stats.sock"

    def preflight(self) -> None:
        haproxy_binary()

    def prepare(self, say: Say) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.config_file, render(self.settings.host, self.settings.gateway_port, self.gateways,
                                                  self.stats_socket))

    def command(self) -> list[str]:
        # -db: stay in the foreground (our pid file, our process group); -f: only our file.
        return [haproxy_binary(), "-db", "-f", str(self.config_file)]

    def servers(self, timeout: float = 3.0) -> dict[str, str]:
        """Gateway name -> its status in HAProxy's health checks (UP, DOWN, ...), from the stats socket."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(self.stats_socket))
                s.sendall(b"show stat\n")
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
        except OSError as exc:
            raise ProbeFailed(f"stats socket {self.stats_socket}: {exc.strerror or exc}") from None
        text = b"".join(chunks).decode(errors="replace").lstrip("# ")
        return {row["svname"]: row["status"] for row in csv.DictReader(io.StringIO(text))
                if row.get("pxname") == "gateways" and row.get("svname") not in ("FRONTEND", "BACKEND")}

    def probe(self, timeout: float) -> str:
        status = self.servers(timeout)
        up = sorted(name for name, st in status.items() if st.startswith("UP"))
        if not up:
            raise ProbeFailed(f"no gateway up behind it ({', '.join(f'{n} {s}' for n, s in sorted(status.items()))})")
        return f"{len(up)} of {len(status)} gateways up ({', '.join(up)})"
