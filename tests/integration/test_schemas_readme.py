"""The plain-consumer program in schemas/README.md, run as its text tells a reader to run it, against records
the project's codec put on the real Kafka: every record must come back as it was produced.

The program is taken from the README itself, so the documentation cannot drift from what works. It once
keyed its schema table by the fingerprint read as a big-endian number and looked records up little-endian,
which matched nothing.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer
from fastavro import schemaless_writer

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import MARKER, Codec
from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain.spec import RenderSpec
from tests.unit.jobkit import Driver, submit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "schemas" / "README.md"
PARTITIONS = 3


def readme_program() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Decoding as a plain consumer", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the decoding section should hold exactly one Python block"
    return blocks[0]


def as_json(value):
    # The program prints bytes as hex and tuples become lists: compare in the same terms.
    return json.loads(json.dumps(value, default=bytes.hex, ensure_ascii=False))


def fields_of(message) -> dict:
    return dataclasses.asdict(message)  # a RenderSpec inside as its own object


def domain_messages() -> list:
    """A job's whole life (events), a submission with the optional and array fields set (a command)."""
    d = Driver()
    d.send(submit(key="readme", callback_url="https://x.test/hook"))
    (leased,) = d.grant()
    epoch = leased.epoch
    d.send(c.ReportProgress(d.next_id(), d.job_id, epoch, "w1", 4, 20.0), advance=1_000)
    d.send(c.RecordCheckpoint(d.next_id(), d.job_id, epoch, "w1", ids.checkpoint_key(d.job_id, epoch, 5), 5,
                              25.0, "sha256:abc", 1234), advance=1_000)
    d.send(c.CompleteJob(d.next_id(), d.job_id, epoch, "w1", ids.artifact_key(d.job_id, epoch), "sha256:def",
                         99_000), advance=1_000)
    command = submit(key="readme-2", tenant="ünï", prompt="a fox — in snow", parents=("ja", "jb"))
    return [*d.history, command]


def test_the_readme_program_decodes_every_record_as_produced(stack, make_topic, tmp_path):
    codec = Codec.default()
    topic = make_topic("decode", partitions=PARTITIONS)
    produced: list[tuple[str, bytes, str, dict]] = []  # key, value, schema name, the record as produced

    for message in domain_messages():
        name = f"spotreel.v1.{type(message).__name__}"
        produced.append((message.job_id, codec.encode_message(message), name, fields_of(message)))

    # Not a domain message: bytes fields, one of them optional.
    dead = {"reason": "bad_marker", "detail": "starts with 0000", "source_topic": "spotreel.commands",
            "source_partition": 2, "source_offset": 41, "original_key": b"j\x00\xff", "original": b"\x00\x01\xfe",
            "at_ms": 1_700_000_000_000}
    produced.append(("dead", codec.encode("spotreel.v1.DeadLetteredCommand", dead),
                     "spotreel.v1.DeadLetteredCommand", dead))

    # Written under a released version: reads as the current schema, the fields added since at their defaults.
    old = next(e for e in codec.registry.released["spotreel.v1.LeaseRenewed"]
               if e.fingerprint != codec.registry.current["spotreel.v1.LeaseRenewed"].fingerprint)
    renewed = {"job_id": "jold", "version": 3, "at_ms": 1_700_000_000_500, "causation_id": "hb-1", "epoch": 1,
               "lease_expires_at_ms": 1_700_000_030_500}
    body = io.BytesIO()
    schemaless_writer(body, old.schema, renewed)
    produced.append(("jold", MARKER + old.fingerprint + body.getvalue(), "spotreel.v1.LeaseRenewed",
                     {**renewed, "cancel_requested": False, "drain_requested": False}))

    # Written flat, before RenderSpec (SubmitJob v1): the README's step 4 nests the video in `spec`, as the codec
    # does, and the fields added since v1 read at their defaults.
    v1 = codec.registry.released["spotreel.v1.SubmitJob"][0]
    flat = {"command_id": "c-old", "job_id": "jflat", "tenant": "acme", "idempotency_key": "k", "request_hash": "h",
            "model": "tiny-t2v", "gpu_type": "cpu", "prompt": "a fox in snow", "duration_s": 2.0,
            "resolution": "64x64", "fps": 8, "seed": 7, "num_steps": 20}
    body = io.BytesIO()
    schemaless_writer(body, v1.schema, {f["name"]: flat.get(f["name"], f.get("default")) for f in v1.schema["fields"]})
    lifted = c.SubmitJob("c-old", "jflat", "acme", "k", "h", "cpu",
                         RenderSpec("tiny-t2v", "a fox in snow", 2.0, "64x64", 8, 7, 20))
    produced.append(("jflat", MARKER + v1.fingerprint + body.getvalue(), "spotreel.v1.SubmitJob", fields_of(lifted)))

    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True})
    for key, value, _, _ in produced:
        producer.produce(topic, key=key.encode(), value=value, partition=partition_for(key, PARTITIONS))
    assert producer.flush(15) == 0

    program = tmp_path / "decode.py"
    program.write_text(readme_program(), encoding="utf-8")
    # As the README says: from the repository root, bootstrap servers and topic as the two arguments.
    run = subprocess.run([sys.executable, str(program), stack.kafka_bootstrap, topic], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]

    got = sorted((x["key"], x["schema"], json.dumps(x["record"], sort_keys=True)) for x in lines)
    want = sorted((key, name, json.dumps(as_json(record), sort_keys=True)) for key, _, name, record in produced)
    assert got == want
    # The project's codec, reading the same bytes, agrees.
    for key, value, name, record in produced:
        decoded_name, decoded = codec.decode(value)
        assert (decoded_name, as_json(decoded)) == (name, as_json(record)), key
