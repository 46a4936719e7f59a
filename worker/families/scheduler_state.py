"""A scheduler's internal state as tensors + JSON (never pickle), for exact resume of any sampler.

Multistep samplers (UniPC, DPM-Solver++) keep the previous model outputs, timesteps, `lower_order_nums`,
`last_sample` and their step index inside the scheduler object; flow-matching ones keep sigmas and the step
index. Rebuilding a scheduler with `set_timesteps` and the step index is enough for single-step samplers
only, so the checkpoint carries every attribute of the scheduler (its config aside, which comes from the
model directory): tensors under `sched.<name>` (list items under `sched.<name>.<i>`), everything else as
JSON in the checkpoint's metadata. An attribute of a type this module does not know is an error at
snapshot time, so a new scheduler cannot be checkpointed half.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

PREFIX = "sched."
_SKIP = {"_internal_dict"}
_SCALARS = (bool, int, float, str, type(None))


def _item(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"tensor": key, "device": value.device.type}
    if isinstance(value, np.ndarray):
        tensors[key] = torch.from_numpy(np.ascontiguousarray(value)).clone()
        return {"ndarray": key}
    if isinstance(value, np.generic):
        return {"json": value.item(), "np": value.dtype.str}
    if isinstance(value, _SCALARS):
        return {"json": value}
    raise TypeError(f"scheduler attribute {key} has type {type(value).__name__}, which a checkpoint cannot hold")


def dump(scheduler) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, JSON document) of every attribute of `scheduler` but its config."""
    tensors: dict[str, torch.Tensor] = {}
    doc: dict[str, Any] = {}
    for name, value in sorted(vars(scheduler).items()):
        if name in _SKIP:
            continue
        key = PREFIX + name
        if isinstance(value, (list, tuple)):
            doc[name] = {"list": [_item(v, f"{key}.{i}", tensors) for i, v in enumerate(value)],
                         "tuple": isinstance(value, tuple)}
        else:
            doc[name] = _item(value, key, tensors)
    return tensors, {"class": type(scheduler).__name__, "attrs": doc}


def _restore_item(spec: dict[str, Any], tensors: dict[str, torch.Tensor], device: torch.device) -> Any:
    if "tensor" in spec:
        t = tensors[spec["tensor"]]
        return t.to(device) if spec["device"] != "cpu" else t.clone()
    if "ndarray" in spec:
        return tensors[spec["ndarray"]].numpy().copy()
    if "np" in spec:
        return np.dtype(spec["np"]).type(spec["json"])
    return spec["json"]


def load(scheduler, tensors: dict[str, torch.Tensor], doc: dict[str, Any], device: torch.device) -> None:
    """Overwrite `scheduler`'s attributes with a dump's (the scheduler must be of the dumped class)."""
    if doc.get("class") != type(scheduler).__name__:
        raise ValueError(f"scheduler state is of {doc.get('class')!r}, the scheduler is {type(scheduler).__name__}")
    for name, spec in doc["attrs"].items():
        if "list" in spec:
            items = [_restore_item(s, tensors, device) for s in spec["list"]]
            value: Any = tuple(items) if spec["tuple"] else items
        else:
            value = _restore_item(spec, tensors, device)
        setattr(scheduler, name, value)
