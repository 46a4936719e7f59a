"""schemas/README.md tells internal producers how to compute a SubmitJob the way the gateway does. Its code
block is run here against the gateway's and the domain's own functions, so a change to either (a salt, a
default, a field of the hashed body) fails until the README says the same."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from spotreel.adapters.partitioning import murmur2, partition_for
from spotreel.domain import ids, limits
from spotreel.api.config import GatewayConfig
from spotreel.api.submission import MAX_SEED, build_submit, normalize

README = Path(__file__).resolve().parents[2] / "schemas" / "README.md"
SECTION = "## Submitting a job without the gateway"
CFG = GatewayConfig()


def _recipe() -> dict:
    text = README.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"{SECTION!r} should hold exactly one Python block"
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    return namespace


R = _recipe()

names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z")
text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=40)
job_ids = st.from_regex(r"\Aj[0-9a-f]{32}\Z")
# What a client may send: any subset of the optional fields. Values stay well inside what the gateway
# accepts, so that tightening its validation does not turn this test of the formulas into one of the rules.
optional = {
    "model": names,
    "gpu_type": names,
    "duration": st.one_of(st.integers(1, 60), st.floats(0.01, 60.0)),
    "resolution": st.sampled_from(["256x256", "512x512", "512x320", "32x24"]),
    "fps": st.integers(1, 30),
    "num_steps": st.integers(1, 200),
    "seed": st.integers(0, MAX_SEED),
    "priority": st.integers(0, 9),
    "callback_url": st.from_regex(r"\Ahttps://[a-z]{1,10}\.example\.com/[a-z0-9]{0,10}\Z"),
    "parents": st.lists(job_ids, max_size=3, unique=True),
    "dag_policy": st.sampled_from(["fail_fast", "continue"]),
}
# Times the gateway accepts: up to the end of year 9999 (limits.MAX_TIME_MS), a delay counted from a now that leaves
# room for it (later ones are refused with 422, test_time_limits.py).
NOW_MAX_MS = limits.MAX_TIME_MS - 86_400_000
timing = st.one_of(st.just({}), st.fixed_dictionaries({"run_at": st.integers(0, limits.MAX_TIME_MS)}),
                   st.fixed_dictionaries({"delay_seconds": st.integers(0, 86_400)}))
requests = st.builds(lambda prompt, rest, when: {"prompt": prompt, **rest, **when},
                     text.filter(str.strip), st.fixed_dictionaries({}, optional=optional), timing)


@given(tenant=text, key=text)
def test_job_id_is_the_domains(tenant: str, key: str) -> None:
    assert R["job_id_for"](tenant, key) == ids.job_id_for(tenant, key)


@given(sent=requests, tenant=text, key=text, now_ms=st.integers(0, NOW_MAX_MS))
def test_body_hash_seed_and_run_at_are_the_gateways(sent: dict, tenant: str, key: str, now_ms: int) -> None:
    normalized = normalize(dict(sent), CFG)
    body = R["gateway_body"](**sent)
    assert body == normalized
    # Equal dicts can still hash differently (2 vs 2.0): the hash is over the JSON text.
    assert R["request_hash"](body) == ids.request_hash(normalized)

    submit = build_submit(tenant, key, normalized, now_ms, "cmd-1")
    job_id = R["job_id_for"](tenant, key)
    assert submit.job_id == job_id
    assert submit.request_hash == R["request_hash"](body)
    assert submit.spec.seed == R["seed_for"](job_id, body)
    assert submit.run_at_ms == R["run_at_ms_for"](body, now_ms)


def test_an_integer_duration_hashes_as_its_float() -> None:
    assert R["request_hash"](R["gateway_body"]("fox", duration=2)) == \
        ids.request_hash(normalize({"prompt": "fox", "duration": 2.0}, CFG))


@given(job_id=job_ids, partitions=st.integers(1, 64))
def test_the_partition_formula_is_the_partitioner(job_id: str, partitions: int) -> None:
    # The README states the formula in prose; this is that formula, against the one every producer uses.
    assert (murmur2(job_id.encode("utf-8")) & 0x7FFFFFFF) % partitions == partition_for(job_id, partitions)
