"""A worker serving several registry models holds one loaded and declares only that one warm; a lease for
another of its models (the scheduler gives one only when the loaded model has no job for it) switches:
unload, load while the lease is kept alive, declare the new one warm."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from spotreel.worker.runtime import RuntimeOptions, ServedModel, WorkerRuntime
from spotreel.worker.signals import PreemptionNotice
from spotreel.domain.spec import RenderSpec
from spotreel.worker.transport import WorkerLease, Verdict, WorkerProfile

pytestmark = pytest.mark.unit


@dataclass
class Beats:
    profile: WorkerProfile
    heartbeats: list[str] = field(default_factory=list)

    def heartbeat(self, lease: WorkerLease) -> Verdict:
        self.heartbeats.append(lease.job_id)
        return Verdict(accepted=True)


def _lease(model: str) -> WorkerLease:
    return WorkerLease("j1", 1, "w", 1, 1500, 0, f"{model}@g", "g", RenderSpec(model, "a fox", 1.0, "64x64", 8, 1, 10),
                 heartbeat_seconds=0.1)


def _runtime(loads: list[str], fail: set[str] = frozenset()) -> tuple[WorkerRuntime, Beats, list[dict]]:
    def loader(name: str):
        def load():
            time.sleep(0.35)  # longer than the heartbeat period: the lease must be renewed meanwhile
            if name in fail:
                raise RuntimeError(f"no weights for {name}")
            loads.append(name)
            return f"renderer:{name}"
        return load

    models = {"wan": ServedModel("wan", "unipc", 5.0, loader("wan")),
              "ltx": ServedModel("ltx", "flow_euler", 3.0, loader("ltx"))}
    beats = Beats(WorkerProfile("w", "g", ("wan", "ltx"), warm_models=("wan",)))
    said: list[dict] = []
    rt = WorkerRuntime(beats, "renderer:wan", None, None, None, PreemptionNotice(1.0),
                       RuntimeOptions(model="wan", sampler="unipc", guidance_scale=5.0),
                       report=lambda kind, **f: said.append({"event": kind, **f}), models=models)
    return rt, beats, said


def test_a_lease_of_another_served_model_switches_the_loaded_one() -> None:
    loads: list[str] = []
    rt, beats, said = _runtime(loads)
    rt._switch_for(_lease("wan"))  # the loaded model: nothing happens
    assert loads == [] and rt.renderer == "renderer:wan"
    rt._switch_for(_lease("ltx"))
    assert loads == ["ltx"] and rt.renderer == "renderer:ltx"
    assert (rt.options.model, rt.options.sampler, rt.options.guidance_scale) == ("ltx", "flow_euler", 3.0)
    assert rt.transport.profile.warm_models == ("ltx",)  # what the next RequestWork declares
    assert rt.transport.profile.models == ("wan", "ltx")
    assert beats.heartbeats, "the lease was not renewed while the model loaded"
    assert [e["event"] for e in said] == ["switching", "switched"]
    assert rt.metrics.registry.get_sample_value("spotreel_worker_model_switch_seconds_count") == 1


def test_a_model_the_worker_does_not_serve_is_not_loaded() -> None:
    loads: list[str] = []
    rt, _, _ = _runtime(loads)
    rt._switch_for(_lease("mochi"))  # job.py hands this lease back unused (wrong model)
    assert loads == [] and rt.options.model == "wan"


def test_a_failed_load_brings_the_old_model_back_and_keeps_declaring_it() -> None:
    loads: list[str] = []
    rt, _, _ = _runtime(loads, fail={"ltx"})
    rt._switch_for(_lease("ltx"))
    assert loads == ["wan"] and rt.renderer == "renderer:wan"
    assert rt.options.model == "wan" and rt.transport.profile.warm_models == ("wan",)
