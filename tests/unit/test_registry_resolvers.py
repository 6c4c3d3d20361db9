"""Names the registry does not hold are asked of its resolvers (``registry.definition``):
how code above the engine (a Django task's run) owns names without the engine naming it."""

from __future__ import annotations

import pytest

from everystep import registry
from everystep.registry import Resolver, WorkflowDef


@pytest.fixture
def resolvers(monkeypatch: pytest.MonkeyPatch) -> list[Resolver]:
    fresh: list[Resolver] = []
    monkeypatch.setattr(registry, "_resolvers", fresh)
    return fresh


def _body() -> None:
    return None


def test_a_registered_workflow_wins_over_a_resolver(resolvers, monkeypatch):
    """A ``@workflow`` under a name is its definition; no resolver is asked for it."""
    own = WorkflowDef("unit-resolvers.mine", _body)
    monkeypatch.setattr(registry, "_workflows", {own.name: own})
    asked: list[str] = []
    registry.add_resolver(Resolver(lambda name: asked.append(name), lambda name: "no"))
    assert registry.definition(own.name) is own
    assert asked == []


def test_a_resolver_finds_names_no_workflow_holds_and_says_why_it_did_not(resolvers):
    """A resolver's definition is found for its names; for others each says why not, and
    adding it twice asks it once."""
    theirs = WorkflowDef("unit-resolvers.theirs", _body, begin=lambda claim: "begun")
    resolver = Resolver(
        resolve=lambda name: theirs if name == theirs.name else None,
        why_unknown=lambda name: f"not one of mine: {name}",
    )
    registry.add_resolver(resolver)
    registry.add_resolver(resolver)
    assert registry.definition(theirs.name) is theirs
    assert registry.definition("unit-resolvers.nobody") is None
    assert registry.why_unknown("unit-resolvers.nobody") == [
        "not one of mine: unit-resolvers.nobody"
    ]


def test_a_plain_workflow_has_no_begin_or_finished_hook():
    """A ``@workflow``'s definition carries no hooks: its pass calls no adapter code."""
    defn = WorkflowDef("unit-resolvers.plain", _body)
    assert (defn.begin, defn.finished) == (None, None)
