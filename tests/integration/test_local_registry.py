"""The local stack's gateway checks submissions against a model registry by default (issue 13): the gateway
started the way `spotreel infra up` starts it (devstack's GatewayService: its prepare writes
`$SPOTREEL_HOME/models.toml` when SPOTREEL_MODEL_REGISTRY is unset, its env names the file) is a real
`spotreel gateway` process on the shared stack's Kafka and Cassandra, with a home and port of its own. Only
refusals are asked of it, so nothing is written to the shared stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import replace

import pytest

from spotreel.platform import ports as portlib
from spotreel.devstack.services import GatewayService
from spotreel.personal.setup import kek_path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def post(url: str, key: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{url}/v1/videos", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                          "Idempotency-Key": f"local-registry-{os.getpid()}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - our own loopback gateway
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def free_gateway_port(host: str) -> int:
    """A port whose metrics sibling (+4) is free as well."""
    for _ in range(50):
        port = portlib.free_port()
        if portlib.bindable(host, port + 4):
            return port
    raise AssertionError("no free gateway port")


def test_the_local_stacks_gateway_refuses_an_unknown_model_listing_the_known_ones(settings, stack, tmp_path):
    # The shared stack's keystore holds data keys, so the gateway must be given the stack's KEK (it refuses to
    # start without it, docs/decisions/0035-crypto-shredding.md).
    s = replace(settings, home=tmp_path / "home", gateway_port=free_gateway_port(settings.host), model_registry="",
                kek_file=str(kek_path(settings)))
    gw = GatewayService(s)
    try:
        gw.ensure_up(lambda line: None)
        registry = s.home / "models.toml"
        assert "[models.tiny-t2v]" in registry.read_text(encoding="utf-8")
        base = {"prompt": "a red fox in snow", "resolution": "32x32", "duration": 1.0}
        status, body = post(s.gateway_url, s.dev_api_key, {**base, "model": "zeroscope-xl"})
        assert status == 422, body
        assert body["error"]["field"] == "model" and "known models: tiny-t2v" in body["error"]["message"], body
        status, body = post(s.gateway_url, s.dev_api_key, {**base, "sampler": "flow_euler"})
        assert status == 422 and body["error"]["field"] == "sampler", body
        assert "ddim, euler_a, unipc, dpmpp" in body["error"]["message"], body
        status, body = post(s.gateway_url, s.dev_api_key, {**base, "resolution": "640x480"})
        assert status == 422 and body["error"]["field"] == "resolution" and "to 512" in body["error"]["message"]
        # An operator's `spotreel model list` (SPOTREEL_MODEL_REGISTRY unset) reads the same file.
        env = {**os.environ, "SPOTREEL_HOME": str(s.home), "SPOTREEL_MODEL_REGISTRY": ""}
        listed = subprocess.run([sys.executable, "-m", "spotreel.cli", "model", "list"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and listed.stdout.startswith("tiny-t2v  family=unet3d"), listed
    finally:
        gw.stop(lambda line: None)
