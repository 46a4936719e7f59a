"""`spotreel capacity` wiring that needs no servers: one default pool across gateway, worker and capacity,
the local provider's worker command line as the worker CLI reads it, and refusals of bad options."""

from __future__ import annotations

import sys

import pytest

from spotreel.cli import build_parser, main
from spotreel.domain.ids import pool_key
from spotreel.services.capacity.cli import SIM_POOL
from spotreel.services.capacity.provider_sim import SimulatedProvider
from spotreel.services.capacity.providers import LocalProvider, default_worker_argv
from spotreel.fleetsim.config import SimConfig
from spotreel.api.config import GatewayConfig
from spotreel.worker.cli import DEFAULT_POOL, _pools

pytestmark = pytest.mark.unit


def test_one_default_pool_where_jobs_with_defaults_go():
    gw = GatewayConfig()
    assert DEFAULT_POOL == pool_key(gw.default_model, gw.default_gpu_type)
    args = build_parser().parse_args(["capacity"])
    assert args.pool is None and args.provider == "local"  # resolved to DEFAULT_POOL for the local provider
    assert SIM_POOL != DEFAULT_POOL, "simulated workers must not answer real jobs by default"


def test_the_default_worker_command_is_spotreel_worker_with_matching_pool_id_and_threads():
    argv = default_worker_argv(DEFAULT_POOL, "local-0123abcd", threads=2)
    assert argv[:4] == [sys.executable, "-m", "spotreel.cli", "worker"]
    args = build_parser().parse_args(argv[3:])
    assert args.command == "worker" and args.worker_id == "local-0123abcd" and args.threads == 2
    assert _pools(args.pool) == ("any", ("tiny-t2v",))


def test_a_worker_argv_template_gets_pool_id_and_threads(tmp_path):
    provider = LocalProvider("m@g", tmp_path / "run", tmp_path / "logs", threads=3,
                             argv=["run-worker", "--pool={pool}", "{worker_id}", "-j", "{threads}"])
    assert provider._argv("w-1") == ["run-worker", "--pool=m@g", "w-1", "-j", "3"]
    with pytest.raises(ValueError):
        LocalProvider("m@g", tmp_path / "run", tmp_path / "logs", threads=0)


def test_with_worker_metrics_each_worker_gets_a_metrics_port_of_its_own(tmp_path):
    plain = LocalProvider(DEFAULT_POOL, tmp_path / "run", tmp_path / "logs")
    assert "--metrics-port" not in plain._argv("w-0")
    provider = LocalProvider(DEFAULT_POOL, tmp_path / "run", tmp_path / "logs", worker_metrics=True)
    argv = provider._argv("w-1")
    args = build_parser().parse_args(argv[3:])  # what `spotreel worker` reads
    assert args.command == "worker" and args.metrics_port > 0
    assert build_parser().parse_args(["capacity", "--worker-metrics"]).worker_metrics is True


@pytest.mark.parametrize("argv, says", [
    (["--pool", "no-gpu-type"], "--pool must look like MODEL@GPU_TYPE"),
    (["--floor", "3", "--ceiling", "2"], "floor <= ceiling"),
    (["--interval", "0"], "--interval must be positive"),
    (["--worker-threads", "0"], "--worker-threads must be at least 1"),
    (["--provider", "simulated", "--sim-mtbf", "-1"], "--sim-mtbf must not be negative"),
    (["--provider", "simulated", "--sim-notice-share", "1.5"], "--sim-notice-share must be within [0, 1]"),
    (["--provider", "simulated", "--sim-step-seconds", "0"], "--sim-step-seconds must be positive"),
    (["--provider", "simulated", "--sim-lease-wait", "90"], "--sim-lease-wait must be within (0, 60]"),
    (["--provider", "simulated", "--sim-checkpoint-policy", "often"], "--sim-checkpoint-policy"),
    (["--provider", "ec2", "--ec2-launch-template", "lt", "--ec2-subnets", "subnet-a"], "--ec2-instance-types"),
    (["--provider", "ec2", "--ec2-subnets", "subnet-a", "--ec2-instance-types", "g6.xlarge"], "--ec2-launch-template"),
    (["--provider", "ec2", "--ec2-launch-template", "lt", "--ec2-subnets", "subnet-a", "--ec2-instance-types", "g6.xlarge"] + ["--ec2-on-demand-share", "2"], "--ec2-on-demand-share must be within [0, 1]"),
    (["--provider", "ec2", "--ec2-launch-template", "lt", "--ec2-subnets", "subnet-a", "--ec2-instance-types", "g6.xlarge"] + ["--ec2-worker-env", "SPOTREEL_WORKER_KEY=sr_live"], "SPOTREEL_WORKER_KEY is a secret"),
    (["--provider", "ec2", "--ec2-launch-template", "lt", "--ec2-subnets", "subnet-a", "--ec2-instance-types", "g6.xlarge"] + ["--ec2-secret", "SPOTREEL_WORKER_KEY"], "--ec2-secret takes NAME=VALUE"),
])
def test_bad_options_are_refused_before_anything_starts(argv, says, capsys):
    assert main(["capacity", *argv]) == 2
    assert says in capsys.readouterr().err


def test_the_simulated_provider_refuses_a_pool_without_gpu_type_and_a_negative_lead():
    with pytest.raises(ValueError):
        SimulatedProvider("nogpu", "http://127.0.0.1:9", "k", SimConfig())
    with pytest.raises(ValueError):
        SimulatedProvider("m@g", "http://127.0.0.1:9", "k", SimConfig(), notice_lead_s=-1)
