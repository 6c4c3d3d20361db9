"""The UI's pure helpers: the fork/sequence graph from step ids, and the timeline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from everystep.ui.graph import ForkNode, StepNode, build_graph
from everystep.ui.timeline import build_timeline, format_duration


def shape(nodes: list[Any]) -> list[Any]:
    """A compact picture of a graph: step keys, and (fork id, {branch: shape}) for forks."""
    return [
        (node.fork_id, {b.index: shape(b.nodes) for b in node.branches})
        if node.is_fork
        else node.key
        for node in nodes
    ]


def test_sequential_steps_are_in_numeric_order():
    """Numbered steps come out 1, 2, …, 10 even if they arrive out of order."""
    ids = ["1", "3", "2", "10", "9"]
    assert shape(build_graph(ids, str)) == ["1", "2", "3", "9", "10"]


def test_named_steps_keep_their_place():
    """A named step stays where it started among its numbered siblings."""
    assert shape(build_graph(["first", "2", "third", "4"], str)) == ["first", "2", "third", "4"]


def test_fork_has_one_column_per_branch_in_index_order():
    """``forked``'s ids give a step, a fork with three branches (one a sequence), a step."""
    ids = ["1", "fan.0.1", "fan.2.1", "fan.1.right", "fan.2.2", "3"]
    assert shape(build_graph(ids, str)) == [
        "1",
        ("fan", {"0": ["1"], "1": ["right"], "2": ["1", "2"]}),
        "3",
    ]


def test_branches_sort_numerically():
    """Branch 10 comes after branch 2."""
    graph = build_graph(["f.10.1", "f.2.1", "f.0.1"], str)
    assert isinstance(graph[0], ForkNode)
    assert [branch.index for branch in graph[0].branches] == ["0", "2", "10"]


def test_nested_forks_nest_with_full_fork_ids():
    """``nested``'s ids: a fork whose branches hold a fork and a sequence ending in a fork."""
    ids = ["1.0.1.0.1", "1.0.1.1.1", "1.1.1", "1.1.2.0.1", "1.1.2.1.1", "2.0.1.1.1"]
    assert shape(build_graph(ids, str)) == [
        (
            "1",
            {
                "0": [("1.0.1", {"0": ["1"], "1": ["1"]})],
                "1": ["1", ("1.1.2", {"0": ["1"], "1": ["1"]})],
            },
        ),
        ("2", {"0": [("2.0.1", {"1": ["1"]})]}),
    ]


def test_numbered_fork_sorts_among_numbered_steps():
    """A fork at position 2 sits between steps 1 and 3 whatever the arrival order."""
    assert shape(build_graph(["3", "1", "2.0.1"], str)) == ["1", ("2", {"0": ["1"]}), "3"]


def test_nodes_carry_the_callers_items():
    """Each step node holds the item it was built from and its full id."""
    items = [{"id": "1"}, {"id": "x.0.1"}]
    graph = build_graph(items, lambda item: item["id"])
    assert isinstance(graph[0], StepNode) and graph[0].item is items[0]
    assert isinstance(graph[1], ForkNode)
    leaf = graph[1].branches[0].nodes[0]
    assert isinstance(leaf, StepNode)
    assert (leaf.key, leaf.step_id, leaf.item) == ("1", "x.0.1", items[1])


def test_malformed_ids_become_plain_steps_and_duplicates_collapse():
    """An id with two segments is one step; a repeated id appears once."""
    assert shape(build_graph(["a.b", "1", "1"], str)) == ["a.b", "1"]


def test_no_steps_no_graph():
    """A run without steps has an empty graph."""
    assert build_graph([], str) == []


@dataclass
class Timed:
    started_at: datetime
    finished_at: datetime | None


T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_timeline_positions_bars_in_percent_of_the_span():
    """Steps over 0-1 s, 1-3 s and 3-4 s sit at 0/25/75 % with widths 25/50/25 %."""
    items = [Timed(at(0), at(1)), Timed(at(1), at(3)), Timed(at(3), at(4))]
    timeline = build_timeline(items, open_until=at(100))
    assert [(bar.left, bar.width) for bar in timeline.bars] == [
        ("0.00", "25.00"),
        ("25.00", "50.00"),
        ("75.00", "25.00"),
    ]
    assert timeline.span == timedelta(seconds=4)
    assert [bar.duration for bar in timeline.bars] == [timedelta(seconds=s) for s in (1, 2, 1)]


def test_timeline_open_step_runs_until_open_until():
    """A step without an outcome stretches to ``open_until`` and has no duration."""
    timeline = build_timeline([Timed(at(0), at(1)), Timed(at(1), None)], open_until=at(2))
    assert [(bar.left, bar.width) for bar in timeline.bars] == [
        ("0.00", "50.00"),
        ("50.00", "50.00"),
    ]
    assert timeline.bars[1].duration is None


def test_timeline_of_one_instant_does_not_divide_by_zero():
    """Steps that start and finish at the same instant get zero offsets and widths."""
    timeline = build_timeline([Timed(at(0), at(0)), Timed(at(0), at(0))], open_until=at(0))
    assert [(bar.left, bar.width) for bar in timeline.bars] == [("0.00", "0.00")] * 2
    assert build_timeline([], open_until=at(0)).bars == []


def test_format_duration():
    """Durations read as ms, s, min, h or d; None reads as nothing."""
    cases = {0.25: "250 ms", 12.3: "12.30 s", 245: "4 min 5 s", 7800: "2 h 10 min"}
    for seconds, text in cases.items():
        assert format_duration(timedelta(seconds=seconds)) == text
    assert format_duration(timedelta(days=3, hours=4)) == "3 d 4 h"
    assert format_duration(None) == ""
