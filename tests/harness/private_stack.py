"""A whole spotreel stack of a test's own: its own SPOTREEL_HOME, its own ports, its own servers and services.

Tests that restart Kafka or Cassandra, or kill the stack's services, must never do that to the session
stack other tests share, so they get one of these. It is started and stopped with the project's own
tooling (`spotreel infra up` / `infra down`, as subprocesses with the stack's SPOTREEL_* environment), reuses
the jar cache (`~/.cache/spotreel`), and proves at the end that nothing it started is left: no process whose
environment names its home, no listener on its ports.

Single components are stopped the way `infra down` stops them (SIGTERM to the process group, SIGKILL after
the timeout) or killed with SIGKILL; `up()` then starts exactly what is missing, as it always does.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from spotreel.platform import ports as portlib
from spotreel.platform.processes import group_members, read_pidfile, stop_group
from spotreel.devstack.services import settings_env
from spotreel.devstack.settings import DevstackSettings
from spotreel.devstack.stack import components
from spotreel.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# 2xxxx: away from the shared stack (17xxx-19xxx), the CI clone's 47xxx-49xxx and the ephemeral range;
# SeaweedFS's gRPC ports are each HTTP port + 10000, so they land in 3xxxx.
PORT_RANGE = (20000, 27900)
PORT_FIELDS = ("kafka_port", "kafka_controller_port", "cassandra_port", "cassandra_storage_port", "s3_port",
               "s3_master_port", "s3_volume_port", "s3_filer_port", "s3_admin_port", "gateway_port")


def _block_free(host: str, base: int) -> bool:
    # The gateway's metrics siblings (+1..+3) and weed's gRPC ports (+10000) must be free as well.
    wanted = [base + i for i in range(len(PORT_FIELDS) + 3)] + [base + 4 + i + 10000 for i in range(5)]
    return all(portlib.bindable(host, p) for p in wanted)


def private_settings(home: Path, rng: random.Random | None = None, **overrides: object) -> DevstackSettings:
    """Settings for a private stack: the environment's, with `home` and a block of free ports chosen at random
    in PORT_RANGE (and the default topic prefix and keyspace unless `overrides` say otherwise)."""
    rng = rng or random.Random()
    # Tools, heaps and the jar cache as the caller's environment sets them; home and ports its own.
    own = {"home": home, "topic_prefix": "spotreel", "cassandra_keyspace": "spotreel", "worker_gateway_url": "",
           **overrides}
    base_settings = replace(DevstackSettings.from_env(), **own)  # type: ignore[arg-type]
    for _ in range(200):
        base = rng.randrange(PORT_RANGE[0], PORT_RANGE[1], 20)
        if _block_free(base_settings.host, base):
            return replace(base_settings, **{name: base + i for i, name in enumerate(PORT_FIELDS)})
    raise RuntimeError(f"no free block of ports in {PORT_RANGE}")


@dataclass
class PrivateStack:
    settings: Settings
    log: Callable[[str], None] = lambda line: None

    @property
    def env(self) -> dict[str, str]:
        """The environment of every process of this stack (the CLI, the services, workers)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTREEL_")}
        env.update(settings_env(self.settings))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # -- the tooling -------------------------------------------------------------------------------------

    def infra(self, action: str, timeout: float = 600.0) -> str:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "spotreel.cli", "infra", action], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"`spotreel infra {action}` on the private stack failed ({proc.returncode}):\n{out}"
                               f"\n{self.log_tails()}")
        self.log(f"infra {action}: {time.monotonic() - t0:.1f} s")
        return out

    def up(self) -> list[str]:
        """`infra up`; returns the components it had to start (a crashed one would show up here)."""
        found = re.search(r"\(started ([^)]*)\)", self.infra("up"))
        return [name.strip() for name in found.group(1).split(",")] if found else []

    def down(self) -> str:
        return self.infra("down")

    # -- single components -------------------------------------------------------------------------------

    def component(self, name: str):
        for comp in components(self.settings):
            if comp.name == name:
                return comp
        raise KeyError(name)

    def pid(self, name: str) -> int | None:
        running = read_pidfile(self.component(name).pidfile())
        return running.pid if running else None

    def kill9(self, name: str, timeout: float = 30.0) -> int:
        """SIGKILL the component's whole process group; returns the pid it had."""
        pid = self.pid(name)
        if pid is None:
            raise AssertionError(f"{name} is not running on the private stack")
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while group_members(pid):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} (group {pid}) survived SIGKILL for {timeout} s")
            time.sleep(0.05)
        return pid

    def stop(self, name: str) -> int:
        """Stop it as `infra down` would (SIGTERM, SIGKILL after the stop timeout); returns the pid it had."""
        pid = self.pid(name)
        if pid is None:
            raise AssertionError(f"{name} is not running on the private stack")
        stop_group(pid, self.settings.stop_timeout, name)
        return pid

    def healthy(self, names: tuple[str, ...] | None = None, timeout: float = 3.0) -> bool:
        comps = [c for c in components(self.settings) if names is None or c.name in names]
        return all(c.health(timeout)["healthy"] for c in comps)

    # -- what is left --------------------------------------------------------------------------------------

    def ports(self) -> list[int]:
        return sorted({p for c in components(self.settings) for p in c.ports()})

    def leftovers(self) -> list[str]:
        """Processes whose environment names this stack's home, and listeners on its ports."""
        marker = f"SPOTREEL_HOME={self.settings.home}".encode()
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry.name}/environ").read_bytes()
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            state = stat[stat.rfind(")") + 2:].split()[0]
            if marker in environ.split(b"\0") and state not in ("Z", "X"):
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")[:160]
                found.append(f"pid {entry.name}: {cmd.decode(errors='replace')}")
        found += [f"port {p} still has a listener" for p in self.ports()
                  if portlib.listening(self.settings.host, p, timeout=0.3)]
        return found

    def log_tails(self, chars: int = 2500) -> str:
        out = []
        for comp in components(self.settings):
            path = comp.main_log()
            if path.exists():
                out.append(f"----- {comp.name}: {path}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)


def start_private_stack(home: Path, log: Callable[[str], None] = lambda line: None, rng: random.Random | None = None,
                        **overrides: object):
    """Generator for a fixture: a started private stack; `infra down` and a leftover check afterwards."""
    stack = PrivateStack(private_settings(home, rng, **overrides), log)
    try:
        stack.up()
        yield stack
    finally:
        try:
            stack.down()
        finally:
            deadline = time.monotonic() + 30
            left = stack.leftovers()
            while left and time.monotonic() < deadline:
                time.sleep(0.5)
                left = stack.leftovers()
            assert not left, "the private stack left processes or listeners behind:\n" + "\n".join(left)
