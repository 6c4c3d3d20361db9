"""The fork/sequence structure of a run, rebuilt from its step ids alone.

A step id is a path of scope segments: ``<step>`` in the workflow body,
``<fork>.<branch>.<step>`` inside a branch of a fork, and so on for nested forks
(``1``, ``fan.0.1``, ``fan.2.2``, ``2.0.1.1.1``). A fork consumes one position of its
scope, so ``2.0.1`` is step 1 of branch 0 of the fork at position 2.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar, cast

T = TypeVar("T")
E = TypeVar("E")


@dataclass(frozen=True)
class StepNode(Generic[T]):
    """One recorded step: its key within its scope, its full id and the caller's item."""

    key: str
    step_id: str
    item: T
    # Read by _graph.html on every node: a template lookup of a missing attribute goes
    # through three failed attempts, thousands of times on a big run.
    is_fork = False
    is_gap = False


@dataclass(frozen=True)
class Branch(Generic[T]):
    """One branch of a fork: its index and the steps and forks it ran, in order."""

    index: str
    nodes: list[Node[T]]
    is_gap = False


@dataclass(frozen=True)
class ForkNode(Generic[T]):
    """A ``parallel()`` call: its key within its scope, its id prefix and its branches."""

    key: str
    fork_id: str
    branches: list[Branch[T]]
    is_fork = True
    is_gap = False


Node: TypeAlias = "StepNode[T] | ForkNode[T]"


@dataclass
class _Scope(Generic[T]):
    # Keyed by (is a fork, key): a malformed run could reuse one key for both.
    entries: dict[tuple[bool, str], StepNode[T] | _Fork[T]] = field(default_factory=dict)


@dataclass
class _Fork(Generic[T]):
    key: str
    fork_id: str
    branches: dict[str, _Scope[T]] = field(default_factory=dict)


def build_graph(items: Iterable[T], step_id: Callable[[T], str]) -> list[Node[T]]:
    """The tree of steps and forks of a run, from its items in the order they started.

    Within a scope, numbered siblings are put in numeric order and named ones keep the
    place they started in (a named step's position is not part of its id). Branches are
    ordered by index. An id that does not fit the scheme becomes a plain step.
    """
    root: _Scope[T] = _Scope()
    for item in items:
        full_id = step_id(item)
        _insert(root, full_id.split("."), "", full_id, item)
    return _finish(root)


def _insert(scope: _Scope[T], segments: list[str], prefix: str, full_id: str, item: T) -> None:
    if len(segments) < 3:
        key = ".".join(segments)
        scope.entries.setdefault((False, key), StepNode(key, full_id, item))
        return
    fork_key, branch, rest = segments[0], segments[1], segments[2:]
    fork = scope.entries.setdefault((True, fork_key), _Fork(fork_key, prefix + fork_key))
    assert isinstance(fork, _Fork)
    branch_scope = fork.branches.setdefault(branch, _Scope())
    _insert(branch_scope, rest, f"{fork.fork_id}.{branch}.", full_id, item)


def _finish(scope: _Scope[T]) -> list[Node[T]]:
    nodes: list[Node[T]] = []
    for entry in scope.entries.values():
        if isinstance(entry, StepNode):
            nodes.append(entry)
            continue
        ordered = sorted(entry.branches.items(), key=lambda pair: _position(pair[0]))
        branches = [Branch(index, _finish(branch)) for index, branch in ordered]
        nodes.append(ForkNode(entry.key, entry.fork_id, branches))
    # The numbered siblings go back into the slots they occupied, in numeric order.
    slots = [i for i, node in enumerate(nodes) if _is_number(node.key)]
    numbered = sorted((nodes[i] for i in slots), key=lambda node: int(node.key))
    for slot, node in zip(slots, numbered, strict=True):
        nodes[slot] = node
    return nodes


def _is_number(key: str) -> bool:
    return key.isascii() and key.isdecimal()


def _position(key: str) -> tuple[int, int, str]:
    return (0, int(key), "") if _is_number(key) else (1, 0, key)


# -- collapsing a big graph ---------------------------------------------------------------

# A scope longer than this, or a fork with more branches, is shown in part: its first
# and last entries and every entry holding a step that did not end ``done`` (what an
# operator looks for), up to ``NOTABLE_SHOWN`` of those; the rest become gaps.
SCOPE_LIMIT = 40
SCOPE_ENDS = 12
BRANCH_LIMIT = 8
BRANCH_ENDS = 2
NOTABLE_SHOWN = 10


@dataclass(frozen=True)
class Gap:
    """Consecutive siblings left out of a collapsed graph: how many (``noun``: steps or
    branches) and, over every step inside them, how many ended in each status."""

    count: int
    noun: str
    statuses: list[tuple[str, int]]
    is_gap = True
    is_fork = False

    @property
    def steps(self) -> int:
        return sum(n for _, n in self.statuses)

    @property
    def what(self) -> str:
        """``388 steps``, ``1 branch``, ``5 steps and forks``."""
        one = {"steps": "step", "branches": "branch", "steps and forks": "step or fork"}
        return f"{self.count} {self.noun if self.count != 1 else one[self.noun]}"

    @property
    def plain(self) -> bool:
        """The gap is steps of one scope only: its count already counts the steps."""
        return self.noun == "steps"


def collapse(nodes: list[Node[T]], status: Callable[[T], str]) -> list[Node[T] | Gap]:
    """``nodes`` with long scopes and wide forks cut down to what fits on a page, at
    every depth; ``status`` gives an item's step status (``done`` is unremarkable)."""
    kept = _thin(nodes, SCOPE_LIMIT, SCOPE_ENDS, "steps", status)
    return [_collapse_fork(node, status) if isinstance(node, ForkNode) else node for node in kept]


def _collapse_fork(fork: ForkNode[T], status: Callable[[T], str]) -> ForkNode[T]:
    branches = _thin(fork.branches, BRANCH_LIMIT, BRANCH_ENDS, "branches", status)
    shown: list[Any] = [
        Branch(b.index, cast(Any, collapse(b.nodes, status))) if isinstance(b, Branch) else b
        for b in branches
    ]
    return ForkNode(fork.key, fork.fork_id, shown)


def _thin(
    entries: list[E], limit: int, ends: int, noun: str, status: Callable[[Any], str]
) -> list[E | Gap]:
    if len(entries) <= limit:
        return list(entries)
    show = set(range(ends)) | set(range(len(entries) - ends, len(entries)))
    notable = [i for i in range(ends, len(entries) - ends) if _remarkable(entries[i], status)]
    show.update(notable[:NOTABLE_SHOWN])
    out: list[E | Gap] = []
    hidden: list[E] = []
    for i, entry in enumerate(entries):
        if i not in show:
            hidden.append(entry)
            continue
        if hidden:
            out.append(_gap(hidden, noun, status))
            hidden = []
        out.append(entry)
    return out


def _gap(hidden: list[Any], noun: str, status: Callable[[Any], str]) -> Gap:
    counts = Counter(status(item) for entry in hidden for item in _items(entry))
    if noun == "steps" and any(isinstance(entry, ForkNode) for entry in hidden):
        noun = "steps and forks"
    return Gap(len(hidden), noun, sorted(counts.items()))


def _remarkable(entry: Any, status: Callable[[Any], str]) -> bool:
    return any(status(item) != "done" for item in _items(entry))


def _items(entry: StepNode[T] | ForkNode[T] | Branch[T]) -> Iterator[T]:
    """Every step item inside ``entry``, at any depth."""
    if isinstance(entry, StepNode):
        yield entry.item
        return
    children: list[Any] = entry.branches if isinstance(entry, ForkNode) else entry.nodes
    for child in children:
        yield from _items(child)
