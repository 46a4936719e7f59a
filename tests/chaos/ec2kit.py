"""The test's cloud: moto is EC2's API, and `Instances` plays the machines moto says it runs.

For each instance moto reports pending or running, `Instances` boots what its user data says: it reads the
script back (ec2_userdata.read), fetches each secret it names from moto's SSM Parameter Store, gives the
instance its own AWS metadata mock (amazon-ec2-metadata-mock on 127.0.0.1, the notices branch's tooling)
in place of the link-local address, and starts the script's `spotreel worker` command with the instance id
as worker id. It also plays the SSM agent (a `systemctl stop spotreel-worker.service` command sent to an
instance SIGTERMs its worker, as systemd would), an OS shutdown (a terminated instance's worker gets
SIGTERM, then SIGKILL after `shutdown_s`), and AWS's spot reclaim (`interrupt`: the instance's metadata
starts answering `spot/instance-action`, and once its worker has exited the instance is terminated in moto
without the manager's tag, as EC2 does at the notice's deadline).

moto (5.2.5) lists every instance of the account in a command sent with `InstanceIds` (its command adds
the instances its empty `Targets` match: all of them), so the agent here takes a drain command as its own
only when the instance's `spotreel:drain` tag names that command, which the provider writes with it.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from spotreel.services.capacity.ec2_userdata import read
from spotreel.services.capacity.provider_ec2 import DRAIN_COMMAND, TAG_DRAIN, TAG_POOL
from tests.integration.prockit import json_lines


@dataclass
class Machine:
    instance_id: str
    proc: subprocess.Popen
    log: Path
    mock: Any
    booted_at: float
    argv: list[str]
    drain_commands_at: list[float] = field(default_factory=list)
    terminated_seen_at: float | None = None
    exited_at: float | None = None
    exit_code: int | None = None
    interrupted_at: float | None = None
    killed: bool = False
    stopping: bool = False  # SIGTERM sent: a second one could end the worker mid-exit instead of cleanly

    def lines(self) -> list[dict]:
        return json_lines(self.log)


class Instances(threading.Thread):
    def __init__(self, ec2: Any, ssm: Any, pool: str, home: Path, start_mock: Callable[..., Any],
                 machine_env: dict[str, str], shutdown_s: float = 20.0) -> None:
        super().__init__(daemon=True, name="ec2-instances")
        self.ec2, self.ssm, self.pool, self.home = ec2, ssm, pool, home
        self.start_mock = start_mock
        self.machine_env = machine_env
        self.shutdown_s = shutdown_s
        self.machines: dict[str, Machine] = {}
        self.states: dict[str, str] = {}
        self.errors: list[str] = []
        self._seen_commands: set[tuple[str, str]] = set()
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - a moto blip is retried; the test sees self.errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._halt.wait(0.25)

    def _tick(self) -> None:
        found = [i for res in self.ec2.describe_instances(
            Filters=[{"Name": f"tag:{TAG_POOL}", "Values": [self.pool]}])["Reservations"] for i in res["Instances"]]
        now = time.time()
        with self._lock:
            for inst in found:
                iid, state = inst["InstanceId"], inst["State"]["Name"]
                self.states[iid] = state
                if state in ("pending", "running") and iid not in self.machines:
                    self.machines[iid] = self._boot(iid)
            for m in self.machines.values():
                if m.exit_code is None and m.proc.poll() is not None:
                    m.exit_code, m.exited_at = m.proc.returncode, now
                state = self.states.get(m.instance_id)
                if state in ("shutting-down", "terminated") and m.terminated_seen_at is None:
                    m.terminated_seen_at = now
                    self._stop_unit(m)  # the OS shutdown stops the unit
                if m.terminated_seen_at is not None and m.exit_code is None and not m.killed \
                        and now - m.terminated_seen_at > self.shutdown_s:
                    self._signal(m, signal.SIGKILL)
                    m.killed = True
                if m.interrupted_at is not None and m.exit_code is not None and state == "running":
                    # AWS reclaims the machine at the notice's deadline; here as soon as its worker is gone.
                    self.ec2.terminate_instances(InstanceIds=[m.instance_id])
            drain_tags = {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(TAG_DRAIN, "")
                          for i in found}
            for cmd in self.ssm.list_commands()["Commands"]:
                if cmd.get("DocumentName") != "AWS-RunShellScript" or \
                        cmd.get("Parameters", {}).get("commands") != [DRAIN_COMMAND]:
                    continue
                for iid in cmd.get("InstanceIds", []):
                    m = self.machines.get(iid)
                    # moto lists every instance of the account in a command sent to InstanceIds; the
                    # instance the command was for carries its id in the drain tag the provider wrote.
                    if m is None or (cmd["CommandId"], iid) in self._seen_commands \
                            or not drain_tags.get(iid, "").endswith(":" + cmd["CommandId"]):
                        continue
                    self._seen_commands.add((cmd["CommandId"], iid))
                    m.drain_commands_at.append(now)
                    self._stop_unit(m)  # systemctl stop: SIGTERM to the unit

    def _boot(self, iid: str) -> Machine:
        raw = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")["UserData"]["Value"]
        plan = read(base64.b64decode(raw).decode())
        secrets = {name: self.ssm.get_parameter(Name=param, WithDecryption=True)["Parameter"]["Value"]
                   for name, param in plan.secrets.items()}
        mock = self.start_mock()
        home = self.home / iid
        home.mkdir(parents=True, exist_ok=True)
        env = {**self.machine_env, "SPOTREEL_HOME": str(home), **plan.env, **secrets}
        # This machine's own metadata service stands where the link-local address would be.
        env.setdefault("SPOTREEL_METADATA_ENDPOINT", mock.url)
        argv = [a.replace("{instance_id}", iid) for a in plan.argv]
        argv[0] = str(Path(sys.executable).parent / argv[0]) if not os.path.isabs(argv[0]) else argv[0]
        log = home / "worker.log"
        out = open(log, "ab")
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        out.close()
        return Machine(iid, proc, log, mock, time.time(), argv)

    def _stop_unit(self, m: Machine) -> None:
        if not m.stopping:
            m.stopping = True
            self._signal(m, signal.SIGTERM)

    def _signal(self, m: Machine, sig: signal.Signals) -> None:
        if m.proc.poll() is None:
            try:
                os.killpg(m.proc.pid, sig)
            except ProcessLookupError:
                pass

    def interrupt(self, iid: str) -> None:
        """EC2's spot interruption: the machine's metadata starts answering `spot/instance-action` now."""
        with self._lock:
            m = self.machines[iid]
            old = m.mock
            old.stop()
            m.mock = self.start_mock(spot_after_s=0, port=int(old.url.rsplit(":", 1)[1]))
            m.interrupted_at = time.time()

    def machine(self, iid: str) -> Machine:
        with self._lock:
            return self.machines[iid]

    def all(self) -> list[Machine]:
        with self._lock:
            return list(self.machines.values())

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        deadline = time.time() + self.shutdown_s  # a worker still shutting down gets to finish
        for m in self.all():
            while m.proc.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            if m.exit_code is None and m.proc.poll() is not None:
                m.exit_code, m.exited_at = m.proc.returncode, time.time()
        for m in self.all():
            if m.proc.poll() is None:
                self._signal(m, signal.SIGKILL)
                m.proc.wait(10)
                m.killed = True
