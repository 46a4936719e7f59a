"""The user data an EC2 worker instance boots with: a shell script that installs and starts one systemd unit,
`spotreel-worker.service`, running `spotreel worker --pool POOL --worker-id <instance id>`.

No secret is in it. Plain settings (the control plane's addresses, `SPOTREEL_CLOUD_NOTICES=aws`) are written
into /etc/spotreel/worker.env as they are; each secret (the worker key, by default) is named by an SSM
Parameter Store parameter (a SecureString) that the script reads at boot with the instance profile's
credentials (`aws ssm get-parameter --with-decryption`) into a root-only file. So the instance profile needs
`ssm:GetParameter` on those parameters (and `kms:Decrypt` on their key), and the user data, which anyone
with `ec2:DescribeInstanceAttribute` can read, holds only the parameters' names.

The worker id is the instance id, read from the instance metadata service (IMDSv2: a session token, then
`meta-data/instance-id`), so the provider and the control plane name a machine alike. The unit is stopped
with SIGTERM and up to `stop_timeout_s` to finish: what `systemctl stop` (the provider's drain) and an OS
shutdown do; the worker checkpoints, releases its lease and exits on SIGTERM.

`render` writes the script, `read` takes one apart again (the settings, the secrets' parameter names and
the command), for an operator checking an instance and for the tests that play an instance.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# Settings that are secrets: refused as plain values, to be given as parameter names.
SECRET_SETTINGS = frozenset({"SPOTREEL_WORKER_KEY", "SPOTREEL_S3_SECRET_KEY", "SPOTREEL_S3_ACCESS_KEY",
                             "SPOTREEL_GATEWAY_TOKEN_KEY", "SPOTREEL_DEV_API_KEY", "AWS_SECRET_ACCESS_KEY",
                             "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"})
DEFAULT_METADATA = "http://169.254.169.254"
USER_DATA_LIMIT = 16 * 1024  # EC2's limit on user data before base64
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_PARAM = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_ENV_BEGIN, _ENV_END = "cat > /etc/spotreel/worker.env <<'END_OF_WORKER_ENV'", "END_OF_WORKER_ENV"


@dataclass(frozen=True)
class WorkerLaunch:
    pool: str
    command: str = "spotreel"  # the spotreel executable on the image (a name on PATH or an absolute path)
    env: tuple[tuple[str, str], ...] = ()  # plain settings for the worker
    secrets: tuple[tuple[str, str], ...] = ()  # (setting, SSM parameter name)
    metadata_endpoint: str = ""  # where the boot script asks for the instance id; "" = EC2's own
    stop_timeout_s: int = 110  # inside the two minutes of a spot interruption notice
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, value in self.env:
            if not _NAME.match(name):
                raise ValueError(f"worker setting {name!r} is not a variable name")
            if name in SECRET_SETTINGS:
                raise ValueError(f"{name} is a secret: give it as an SSM parameter name, not in user data")
            if "\n" in value or "\r" in value:
                raise ValueError(f"worker setting {name} holds a line break")
        for name, param in self.secrets:
            if not _NAME.match(name) or not _PARAM.match(param):
                raise ValueError(f"secret {name}={param!r}: need VARIABLE=/parameter/name")


@dataclass(frozen=True)
class WorkerPlan:
    """What a booted instance runs, as `read` finds it in the script."""

    env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)  # setting -> SSM parameter name
    argv: list[str] = field(default_factory=list)  # with "{instance_id}" where the instance id goes
    metadata_endpoint: str = DEFAULT_METADATA


def render(launch: WorkerLaunch) -> str:
    md = launch.metadata_endpoint.rstrip("/") or DEFAULT_METADATA
    if any(c in a for a in (launch.command, launch.pool, *launch.extra_args) for c in "$`\\\n"):
        # The unit is written by an unquoted here-document (for the instance id): no expansion may hide in it.
        raise ValueError("the worker command, pool and arguments may not hold $, `, backslashes or line breaks")
    argv = [launch.command, "worker", "--pool", launch.pool, "--worker-id", "{instance_id}", *launch.extra_args]
    exec_start = " ".join("${INSTANCE_ID}" if a == "{instance_id}" else shlex.quote(a) for a in argv)
    env_lines = [f"{k}={_systemd_quote(v)}" for k, v in launch.env]
    secret_lines = [f"secret {k} {shlex.quote(p)}" for k, p in launch.secrets]
    script = "\n".join([
        "#!/bin/bash",
        f"# spotreel worker for pool {launch.pool}: written by `spotreel capacity --provider ec2`; no secrets here",
        "set -euo pipefail",
        f"MD={shlex.quote(md)}",
        'TOKEN=$(curl -sf -X PUT "$MD/latest/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 21600")',
        'INSTANCE_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" "$MD/latest/meta-data/instance-id")',
        'REGION=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" "$MD/latest/meta-data/placement/region")',
        "install -d -m 0755 /etc/spotreel",
        _ENV_BEGIN,
        *env_lines,
        _ENV_END,
        "umask 077",
        ": > /etc/spotreel/secrets.env",
        "secret() {",
        '  printf \'%s=%s\\n\' "$1" "$(aws ssm get-parameter --region "$REGION" --name "$2" --with-decryption '
        '--query Parameter.Value --output text)" >> /etc/spotreel/secrets.env',
        "}",
        *secret_lines,
        "umask 022",
        "cat > /etc/systemd/system/spotreel-worker.service <<END_OF_WORKER_UNIT",
        "[Unit]",
        "Description=spotreel worker",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        "EnvironmentFile=/etc/spotreel/worker.env",
        "EnvironmentFile=/etc/spotreel/secrets.env",
        f"ExecStart={exec_start}",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"TimeoutStopSec={launch.stop_timeout_s}",
        "Restart=on-failure",
        "[Install]",
        "WantedBy=multi-user.target",
        "END_OF_WORKER_UNIT",
        "systemctl daemon-reload",
        "systemctl enable --now spotreel-worker.service",
        "",
    ])
    if len(script.encode()) > USER_DATA_LIMIT:
        raise ValueError(f"user data is {len(script.encode())} bytes, EC2 takes at most {USER_DATA_LIMIT}")
    return script


def read(script: str) -> WorkerPlan:
    """The settings, secrets and command of a script `render` wrote."""
    lines = script.splitlines()
    try:
        begin = lines.index(_ENV_BEGIN)
        end = lines.index(_ENV_END, begin + 1)
    except ValueError:
        raise ValueError("not a spotreel worker user data script") from None
    env = {}
    for line in lines[begin + 1:end]:
        name, _, value = line.partition("=")
        env[name] = _systemd_unquote(value)
    secrets, argv, md = {}, [], DEFAULT_METADATA
    for line in lines:
        if line.startswith("secret "):
            _, name, param = shlex.split(line)
            secrets[name] = param
        elif line.startswith("ExecStart="):
            argv = ["{instance_id}" if a == "${INSTANCE_ID}" else a for a in shlex.split(line[len("ExecStart="):])]
        elif line.startswith("MD="):
            md = shlex.split(line[3:])[0]
    return WorkerPlan(env, secrets, argv, md)


def _systemd_quote(value: str) -> str:
    # EnvironmentFile= takes double-quoted values with backslash escapes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd_unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
