"""Is a TCP port free, is something listening on it, and which process holds it."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def bindable(host: str, port: int) -> bool:
    """Could a server bind host:port now? SO_REUSEADDR, like the servers, so TIME_WAIT does not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listening(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_HANDED_OUT: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing holds now, and never one this process was handed before: a port picked for a server
    that has not bound it yet is free to the kernel, which could hand the same one to the next caller."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _socket_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], parts[9]
            # Only listeners (0A): a socket that is merely bound never appears in these tables.
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port and inode != "0":
                inodes.add(inode)
    return inodes


def holder(port: int) -> tuple[int, str] | None:
    """(pid, command line) of a process holding a socket bound to `port`, when /proc lets us see it."""
    inodes = _socket_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry.name}/fd/{fd}") in targets:
                    return int(entry.name), _cmdline(int(entry.name))
            except OSError:
                continue
    return None


def _cmdline(pid: int, limit: int = 120) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
    return raw if len(raw) <= limit else raw[: limit - 1] + "…"
