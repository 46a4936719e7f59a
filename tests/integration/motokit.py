"""A private moto server (devstack/moto.py) per test module, and an AWS account in it laid out for a pool:
a VPC with one subnet per zone and the operator's launch template, as the EC2 provider expects them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from spotreel.devstack.moto import MotoServer
from spotreel.platform.ports import free_port
from spotreel.config.settings import Settings

TEMPLATE = "spotreel-worker"


@dataclass
class Account:
    moto: MotoServer
    ec2: Any
    ssm: Any
    subnets: dict[str, str]  # zone -> subnet id

    @property
    def endpoint(self) -> str:
        return self.moto.address()


def running_moto(home: Path) -> Iterator[MotoServer]:
    server = MotoServer(Settings(home=home), free_port())
    server.ensure_up(lambda _line: None)
    try:
        yield server
    finally:
        server.stop(lambda _line: None)


def fresh_account(server: MotoServer, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")) -> Account:
    """Empty the server (moto's reset API) and lay out the account."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(server.address() + "/moto-api/reset", method="POST"),
                           timeout=10).read()
    ec2, ssm = server.client("ec2"), server.client("ssm")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {z: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i + 1}.0/24", AvailabilityZone=z)["Subnet"]["SubnetId"]
               for i, z in enumerate(zones)}
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=TEMPLATE, LaunchTemplateData={
        "ImageId": image, "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"}})
    return Account(server, ec2, ssm, subnets)


def instances(ec2: Any, *states: str) -> list[dict]:
    """Every instance in the account (in these states, when given)."""
    flt = [{"Name": "instance-state-name", "Values": list(states)}] if states else []
    return [i for res in ec2.describe_instances(Filters=flt)["Reservations"] for i in res["Instances"]]


def tags(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
