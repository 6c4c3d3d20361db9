"""The fork/sequence structure of a run, rebuilt from its step ids alone.

A step id is a path of scope segments: ``<step>`` in the workflow body,
``<fork>.<branch>.<step>`` inside a branch of a fork, and so on for nested forks
(``1``, ``fan.0.1``, ``fan.2.2``, ``2.0.1.1.1``). A fork consumes one position of its
scope, so ``2.0.1`` is step 1 of branch 0 of the fork at position 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class StepNode(Generic[T]):
    """One recorded step: its key within its scope, its full id and the caller's item."""

    key: str
    step_id: str
    item: T
    is_fork = False


@dataclass(frozen=True)
class Branch(Generic[T]):
    """One branch of a fork: its index and the steps and forks it ran, in order."""

    index: str
    nodes: list[Node[T]]


@dataclass(frozen=True)
class ForkNode(Generic[T]):
    """A ``parallel()`` call: its key within its scope, its id prefix and its branches."""

    key: str
    fork_id: str
    branches: list[Branch[T]]
    is_fork = True


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
