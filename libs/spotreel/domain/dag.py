"""DAG submissions: validation (with the offending cycle named), topological order, node readiness.

Edges point from parent to child: a node runs after its parents. Nodes keep the order in which they were
submitted, and every choice that could go either way (topological ties, which cycle to report, which parent
to blame) follows that order, so the same submission always gets the same answer.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class DagPolicy(StrEnum):
    FAIL_FAST = "fail_fast"
    CONTINUE = "continue"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"


_UNSUCCESSFUL = frozenset({Outcome.FAILED, Outcome.CANCELLED, Outcome.DEAD_LETTERED})


@dataclass(frozen=True)
class DagNode:
    node_id: str
    parents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", tuple(self.parents))


@dataclass(frozen=True)
class DagLimits:
    max_nodes: int = 1_000
    max_parents: int = 64
    max_edges: int = 10_000
    max_id_length: int = 128


@dataclass(frozen=True)
class DagProblem:
    code: str
    nodes: tuple[str, ...]
    message: str


class DagError(ValueError):
    def __init__(self, problems: Sequence[DagProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(p.message for p in self.problems))

    @property
    def cycle(self) -> tuple[str, ...] | None:
        return next((p.nodes for p in self.problems if p.code == "cycle"), None)


@dataclass(frozen=True)
class Dag:
    """A validated DAG. ``order`` is topological; ``children`` follows submission order."""

    nodes: tuple[DagNode, ...]
    order: tuple[str, ...]
    parents: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False)
    children: Mapping[str, tuple[str, ...]] = field(repr=False, compare=False)


def _limit_problems(nodes: Sequence[DagNode], limits: DagLimits) -> list[DagProblem]:
    problems: list[DagProblem] = []
    if not nodes:
        problems.append(DagProblem("empty", (), "a DAG needs at least one node"))
    if len(nodes) > limits.max_nodes:
        problems.append(
            DagProblem("too_many_nodes", (), f"{len(nodes)} nodes exceed the limit of {limits.max_nodes}")
        )
    edges = sum(len(n.parents) for n in nodes)
    if edges > limits.max_edges:
        problems.append(
            DagProblem("too_many_edges", (), f"{edges} edges exceed the limit of {limits.max_edges}")
        )
    for n in nodes:
        if not n.node_id or len(n.node_id) > limits.max_id_length:
            problems.append(
                DagProblem(
                    "bad_id", (n.node_id,), f"node id {n.node_id!r} must be 1..{limits.max_id_length} characters"
                )
            )
        if len(n.parents) > limits.max_parents:
            problems.append(
                DagProblem(
                    "too_many_parents",
                    (n.node_id,),
                    f"node {n.node_id!r} has {len(n.parents)} parents; the limit is {limits.max_parents}",
                )
            )
    return problems


def _shape_problems(nodes: Sequence[DagNode]) -> list[DagProblem]:
    problems: list[DagProblem] = []
    uses: dict[str, int] = {}
    for n in nodes:
        uses[n.node_id] = uses.get(n.node_id, 0) + 1
    for node_id, count in uses.items():  # one problem per id, however often it repeats
        if count > 1:
            times = "twice" if count == 2 else f"{count} times"
            problems.append(DagProblem("duplicate_id", (node_id,), f"node id {node_id!r} is used {times}"))
    for n in nodes:
        listed: set[str] = set()
        for p in n.parents:
            if p == n.node_id:
                problems.append(DagProblem("self_loop", (p,), f"node {p!r} lists itself as a parent"))
            elif p not in uses:
                problems.append(
                    DagProblem("unknown_parent", (n.node_id, p), f"node {n.node_id!r} has unknown parent {p!r}")
                )
            elif p in listed:
                problems.append(
                    DagProblem("duplicate_parent", (n.node_id, p), f"node {n.node_id!r} lists parent {p!r} twice")
                )
            listed.add(p)
    return problems


def _find_cycle(nodes: Sequence[DagNode], stuck: set[str]) -> tuple[str, ...]:
    """A cycle among ``stuck``: the nodes Kahn's algorithm could not order. Each of them has a parent that
    is also stuck, so walking to such a parent must revisit a node, and the revisited stretch is a cycle."""
    parents = {n.node_id: n.parents for n in nodes}
    start = next(n.node_id for n in nodes if n.node_id in stuck)
    walk: list[str] = []
    at: dict[str, int] = {}
    node = start
    while node not in at:
        at[node] = len(walk)
        walk.append(node)
        node = next(p for p in parents[node] if p in stuck)
    # The walk went child -> parent; report it parent -> child, starting from the earliest-submitted node.
    cycle = list(reversed(walk[at[node] :]))
    rank = {n.node_id: i for i, n in enumerate(nodes)}
    first = min(range(len(cycle)), key=lambda i: rank[cycle[i]])
    return tuple(cycle[first:] + cycle[:first])


def validate(nodes: Iterable[DagNode], limits: DagLimits | None = None) -> Dag:
    """The validated DAG, or DagError listing every problem found (cycles only once the shape is sound)."""
    nodes = tuple(nodes)
    limits = limits or DagLimits()
    problems = _limit_problems(nodes, limits)
    if problems:
        raise DagError(problems)
    problems = _shape_problems(nodes)
    if problems:
        raise DagError(problems)

    rank = {n.node_id: i for i, n in enumerate(nodes)}
    children: dict[str, list[str]] = {n.node_id: [] for n in nodes}
    waiting = {n.node_id: len(n.parents) for n in nodes}
    for n in nodes:
        for p in n.parents:
            children[p].append(n.node_id)
    ready = [rank[n.node_id] for n in nodes if not n.parents]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = nodes[heapq.heappop(ready)].node_id
        order.append(node)
        for child in children[node]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, rank[child])
    if len(order) < len(nodes):
        cycle = _find_cycle(nodes, set(waiting) - set(order))
        path = " -> ".join(repr(c) for c in (*cycle, cycle[0]))
        raise DagError([DagProblem("cycle", cycle, f"dependency cycle: {path}")])
    return Dag(
        nodes=nodes,
        order=tuple(order),
        parents=MappingProxyType({n.node_id: n.parents for n in nodes}),
        children=MappingProxyType({k: tuple(v) for k, v in children.items()}),
    )


class Action(StrEnum):
    WAIT = "wait"
    RUN = "run"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Readiness:
    action: Action
    reason: str = ""
    blame: str | None = None


def readiness(
    parents: Sequence[str], outcomes: Mapping[str, Outcome], policy: DagPolicy | str
) -> Readiness:
    """What to do with one not-yet-started node, given the terminal outcomes known so far (a parent absent
    from ``outcomes`` has not finished).

    * ``fail_fast``: cancel as soon as any parent failed, was cancelled or dead-lettered (the first such
      parent in the node's parent list is named, even if others are still running); run when all
      parents succeeded; otherwise wait.
    * ``continue``: run once every parent is terminal, whatever the outcomes; otherwise wait.
    """
    policy = DagPolicy(policy)
    if policy is DagPolicy.FAIL_FAST:
        for p in parents:
            outcome = outcomes.get(p)
            if outcome in _UNSUCCESSFUL:
                return Readiness(Action.CANCEL, f"parent {p!r} {outcome}", p)
        if all(outcomes.get(p) is Outcome.SUCCEEDED for p in parents):
            return Readiness(Action.RUN)
        return Readiness(Action.WAIT)
    if all(p in outcomes for p in parents):
        return Readiness(Action.RUN)
    return Readiness(Action.WAIT)


@dataclass(frozen=True)
class Resolution:
    run: tuple[str, ...]
    cancel: tuple[tuple[str, str], ...]


def resolve(
    dag: Dag, outcomes: Mapping[str, Outcome], started: Iterable[str], policy: DagPolicy | str
) -> Resolution:
    """Every node to start and every node to cancel now, in topological order.

    ``started`` are nodes that already have a job (running or finished). A cancellation decided here counts
    as a cancelled parent for the rest of the same pass, so a failure cancels its whole downstream at once
    under ``fail_fast``; reasons name the immediate parent and the root cause.
    """
    policy = DagPolicy(policy)
    done = set(started) | set(outcomes)
    known = dict(outcomes)
    root: dict[str, str] = {}
    run: list[str] = []
    cancel: list[tuple[str, str]] = []
    for node in dag.order:
        if node in done:
            continue
        verdict = readiness(dag.parents[node], known, policy)
        if verdict.action is Action.RUN:
            run.append(node)
        elif verdict.action is Action.CANCEL:
            blame = verdict.blame or ""
            cause = root.get(blame, blame)
            root[node] = cause
            known[node] = Outcome.CANCELLED
            suffix = f" (root cause: {cause!r} {known[cause]})" if cause != blame else ""
            cancel.append((node, verdict.reason + suffix))
    return Resolution(tuple(run), tuple(cancel))


def descendants(dag: Dag, node_id: str) -> tuple[str, ...]:
    """Everything downstream of ``node_id``, in topological order."""
    below: set[str] = set()
    frontier = [node_id]
    while frontier:
        for child in dag.children[frontier.pop()]:
            if child not in below:
                below.add(child)
                frontier.append(child)
    return tuple(n for n in dag.order if n in below)
