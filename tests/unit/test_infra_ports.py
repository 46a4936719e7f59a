"""Ports: a picked port is never handed out twice, and a server never takes a stranger's answers for its own."""

from __future__ import annotations

import dataclasses
import socket
import sys
import threading
from pathlib import Path

import pytest

from spotreel.platform.ports import free_port
from spotreel.devstack.server import SinglePortServer
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit

# Binds its port (SO_REUSEADDR, like the servers), listens, then sleeps: a server that answers once it runs.
LISTENER = ("import socket, sys, time; s = socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)")


def test_free_port_never_hands_out_the_same_port_twice() -> None:
    # Nothing binds these: to the kernel each is free again at once, as a port is between being picked
    # for a server and that server binding it.
    picked = [free_port() for _ in range(300)]
    assert len(set(picked)) == len(picked)


class _Listener(SinglePortServer):
    name = "listener"
    port_grace_s = 0.5

    def command(self) -> list[str]:
        return [sys.executable, "-c", LISTENER, str(self.port)]

    def probe(self, timeout: float) -> str:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=timeout).close()
        except OSError as exc:
            raise ProbeFailed(str(exc)) from None
        return "answers"


def _stranger() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_server_refuses_to_start_on_a_port_another_process_holds(settings: Settings, tmp_path: Path) -> None:
    with _stranger() as stranger:
        server = _Listener(dataclasses.replace(settings, home=tmp_path / "home"), stranger.getsockname()[1])
        with pytest.raises(InfraError) as raised:
            server.ensure_up(lambda line: None)
    # It said which port is taken and started nothing: the stranger's answers were never taken for its own.
    assert f"listener: port {server.port} on 127.0.0.1 is already in use" in str(raised.value)
    assert server.running() is None


def test_a_server_starts_once_the_port_is_let_go_within_the_grace(settings: Settings, tmp_path: Path) -> None:
    stranger = _stranger()
    server = _Listener(dataclasses.replace(settings, home=tmp_path / "home"), stranger.getsockname()[1])
    server.port_grace_s = 5.0
    threading.Timer(0.5, stranger.close).start()
    lines: list[str] = []
    try:
        assert server.ensure_up(lines.append) is True
        running = server.running()
        assert running is not None and running.alive()
    finally:
        server.stop(lines.append)
        stranger.close()
    assert server.running() is None
