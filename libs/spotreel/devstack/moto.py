"""The AWS API stand-in: moto in server mode (`moto_server` from the `moto[server]` test extra), bound to
127.0.0.1, answering EC2 and SSM (and every other service moto knows) on one port, state in memory.

The EC2 capacity provider's tests point boto3 at it through the provider's endpoint setting. Each test
starts a private one (`MotoServer(settings, port)` on a free port), so its instances, launch templates and
parameters are its own and vanish with the process.
"""

from __future__ import annotations

from typing import Any

from spotreel.platform import ports as portlib
from spotreel.devstack.server import SinglePortServer, environment_binary
from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.config.settings import Settings

# moto needs credentials to sign with, and accepts any.
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def moto_binary() -> str:
    found = environment_binary("moto_server")
    if found is None:
        raise InfraError("moto: the `moto_server` command was not found",
                         ["install the test extra (pip install -e '.[test]'), which brings moto[server]"])
    return found


class MotoServer(SinglePortServer):
    name = "moto"
    port_grace_s = 2.0

    def __init__(self, settings: Settings, port: int | None = None, region: str = "us-east-1") -> None:
        super().__init__(settings, port)
        self.region = region

    def default_port(self) -> int:
        return self.settings.moto_port

    def preflight(self) -> None:
        moto_binary()

    def command(self) -> list[str]:
        return [moto_binary(), "-H", self.settings.host, "-p", str(self.port)]

    def client(self, service: str, timeout: float = 10.0) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(service, endpoint_url=self.address(), region_name=self.region,
                            config=Config(connect_timeout=timeout, read_timeout=timeout,
                                          retries={"max_attempts": 1}), **FAKE_CREDENTIALS)

    def probe(self, timeout: float) -> str:
        if not portlib.listening(self.settings.host, self.port, timeout=min(timeout, 1.0)):
            raise ProbeFailed(f"nothing listening on {self.address()}")
        try:
            zones = self.client("ec2", timeout).describe_availability_zones()["AvailabilityZones"]
        except Exception as exc:  # botocore: connection, timeout or an error reply
            raise ProbeFailed(f"describe_availability_zones failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        return f"EC2 answers, {len(zones)} zones in {self.region}"
