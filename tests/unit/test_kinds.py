"""The table of the kinds of recorded operation (``everystep.engine.core.kinds``): each
kind declared once, and the lists the engine and ``run_due`` derive from it."""

from __future__ import annotations

from everystep.engine.core import kinds
from everystep.engine.core.kinds import Wake


def test_each_kind_has_one_record_name_of_its_own() -> None:
    """No two kinds share a record name, and each of everystep's is under its prefix."""
    names = [kind.record for kind in kinds.KINDS if kind.record]
    assert len(names) == len(set(names)) == len(kinds.KINDS) - 1
    assert all(name.startswith("everystep.") for name in names)


def test_a_name_not_in_the_table_is_a_step() -> None:
    """A step is recorded under its function's name: any name not in the table."""
    assert kinds.of("shop.charge_card") is kinds.STEP
    assert kinds.of("everystep.sleep") is kinds.SLEEP
    assert kinds.of("everystep.gather") is kinds.GATHER


def test_the_durable_waits_with_a_time_are_derived_from_the_table() -> None:
    """run_due(advance=) moves the sleeps' wake times and the other waits' deadlines."""
    assert kinds.wake_times() == ("everystep.sleep",)
    assert kinds.deadlines() == ("everystep.wait_for", "everystep.result", "everystep.gather")


def test_what_wakes_each_wait() -> None:
    """A wait in progress is woken by an event or runs ending, and a sleep by time; the
    other kinds never wait."""
    assert {kind.call: kind.wake for kind in kinds.KINDS} == {
        "step": None,
        "sleep": Wake.TIME,
        "wait_for": Wake.EVENT,
        "result": Wake.RUNS,
        "gather": Wake.RUNS,
        "start": None,
        "patched": None,
    }
    assert all(kind.wake is not None for kind in kinds.KINDS if kind.in_progress)


def test_only_a_child_start_is_never_held_back_and_only_a_patch_takes_no_position() -> None:
    """The per-kind parts of the hold-back rule and of a run's history beyond a point."""
    assert [kind.call for kind in kinds.KINDS if not kind.held_back] == ["start"]
    assert [kind.call for kind in kinds.KINDS if not kind.takes_position] == ["patched"]
