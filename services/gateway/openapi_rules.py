"""The request rules /openapi.json states as JSON Schema, built from the same patterns and GatewayConfig limits
the gateway's checks use: anchored patterns, a resolution pattern for the gateway's sides and pixel cap, and
with a model registry one anyOf branch per model (its names, sizes, steps and samplers). Split from
openapi.py, which assembles the document from them."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from spotreel.api.config import GatewayConfig


def anchored(pattern: str) -> str:
    # The gateway fullmatches; in a JSON Schema (ECMA-262) pattern `$` ends the string, as intended.
    return f"^{pattern}$"


def _alternation(words: list[str]) -> str:
    """A regex matching exactly `words` (distinct decimal strings), as a prefix tree: "16|24|1080" is
    "(?:1(?:080|6)|24)". Only (?:…), […], ? and literals: the same in Python's re and ECMA-262."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [ch + emit(node[ch]) for ch in sorted(c for c in node if c)]
        if not branches:
            return ""
        singles = [b for b in branches if len(b) == 1]
        longer = [b for b in branches if len(b) > 1]
        parts = longer + ([f"[{''.join(singles)}]" if len(singles) > 1 else singles[0]] if singles else [])
        body = parts[0] if len(parts) == 1 and not longer else f"(?:{'|'.join(parts)})"
        return body + ("?" if "" in node else "")

    return emit(tree)


def _gateway_sides(cfg: GatewayConfig) -> tuple[int, ...]:
    """The sides submission._resolution takes: multiples of resolution_multiple in [min_side, max_side] that
    RESOLUTION can spell (2-4 digits, no leading zero)."""
    return tuple(n for n in range(max(cfg.min_side, 10), min(cfg.max_side, 9999) + 1)
                 if n % cfg.resolution_multiple == 0)


@lru_cache(maxsize=16)
def _pairs_pattern(sides: tuple[int, ...], max_pixels: int) -> str:
    """Exactly the WIDTHxHEIGHT strings with both sides in `sides` (ascending) and a product of at most
    max_pixels. Pairs where one side is at most `low` (low x the largest side fits) need no product test;
    the rest, both sides above `low`, are grouped by the tallest height each width allows."""
    if not sides:
        return "^(?!)$"
    fits = [n for n in sides if n * sides[-1] <= max_pixels]
    low = fits[-1] if fits else 0
    any_side, low_side = _alternation([str(n) for n in sides]), _alternation([str(n) for n in sides if n <= low])
    parts = [f"(?:{any_side})x(?:{low_side})", f"(?:{low_side})x(?:{any_side})"] if low else []
    widths_by_tallest: dict[int, list[int]] = {}
    for w in sides:
        heights = [h for h in sides if h > low and w > low and w * h <= max_pixels]
        if heights:
            widths_by_tallest.setdefault(heights[-1], []).append(w)
    for tallest, widths in widths_by_tallest.items():
        heights = [str(h) for h in sides if low < h <= tallest]
        parts.append(f"(?:{_alternation([str(w) for w in widths])})x(?:{_alternation(heights)})")
    return f"^(?:{'|'.join(parts)})$" if parts else "^(?!)$"


def resolution_pattern(cfg: GatewayConfig) -> str:
    """Exactly the resolutions submission._resolution accepts (sides, multiple, pixel cap)."""
    return _pairs_pattern(_gateway_sides(cfg), cfg.max_pixels)


def _model_resolution_pattern(cfg: GatewayConfig, entry: Any) -> str:
    """The gateway's rule and the registry entry's (a list of sizes, or a side rule) together."""
    sides = _gateway_sides(cfg)
    if entry.side_multiple:
        return _pairs_pattern(tuple(n for n in sides if entry.side_min <= n <= entry.side_max
                                    and n % entry.side_multiple == 0), cfg.max_pixels)
    gateway = re.compile(resolution_pattern(cfg))
    sizes = [size for size in entry.sizes if gateway.search(size)]
    return f"^(?:{_alternation(sizes)})$" if sizes else "^(?!)$"


def registry_rules(cfg: GatewayConfig) -> list[dict[str, Any]]:
    """With a model registry (cfg.models), what each model takes, as one anyOf branch per model: its name,
    resolutions, num_steps and samplers (submission.normalize -> ModelRegistry.problem). A field left out or
    null takes the gateway's default, so a model the default does not suit requires that field. Not stated
    here: the frame range, duration from frames_min / fps to frames_max / fps (422 on duration). Stated
    exactly it takes one branch per fps with its own duration bounds (58 for the local registry), and
    schemathesis' generator gives up on a request body beyond 10 such branches (jsonschema_rs' canonical form
    stays raw), so no case of the operation could be generated at all."""
    if cfg.models is None:
        return []
    branches = []
    for name in cfg.models.names():
        entry = cfg.models.models[name]
        res_pattern = _model_resolution_pattern(cfg, entry)
        lo, hi = max(1, entry.steps_min), min(cfg.max_num_steps, entry.steps_max)
        required = [] if name == cfg.default_model else ["model"]
        props: dict[str, Any] = {
            "model": {"enum": [name, None]} if name == cfg.default_model else {"const": name},
            "resolution": {"type": ["string", "null"], "pattern": res_pattern},
            "num_steps": {"type": ["integer", "null"], "minimum": lo, "maximum": hi},
            "sampler": {"enum": [*entry.samplers(), None]}}
        if not re.search(res_pattern, cfg.default_resolution):
            props["resolution"]["type"], required = "string", [*required, "resolution"]
        if not lo <= cfg.default_num_steps <= hi:
            props["num_steps"]["type"], required = "integer", [*required, "num_steps"]
        branches.append({"required": required, "properties": props} if required else {"properties": props})
    return [{"anyOf": branches}] if branches else [{"not": {}}]
