"""The kinds of recorded operation, each declared once: what the engine needs to know of
it beyond the one path every kind takes (``everystep.engine.core.recorded``).

A body's calls are recorded under a name: a step under its function's, every other kind
under one of everystep's (``everystep.sleep``…). This table says, per kind:

- ``record``: that name ("" for a step: it is recorded under its function's name);
- ``wake``: for a durable wait, what ends it: ``TIME`` (its recorded wake time comes),
  ``EVENT`` (an event sent to the run), ``RUNS`` (the runs it awaits end); None for a
  kind that never waits;
- ``in_progress``: its ``started`` record is a wait in progress, holding its deadline
  (the replay decision then says ``PENDING``, ``everystep.engine.core.replay``); a
  time-woken wait records ``done`` at once, its result the wake time;
- ``takes_position``: it takes the next id of its scope (a patch decision does not: its
  id is its change id);
- ``held_back``: its outcome may be held back and written with the next write
  (``recorded.record``); a child start's record inserts the child with it, at once;
- ``serves``: what a replay gives the body from its record.

Imports nothing of the project, so every room of the engine and the edges above
(``testing.run_due``, the UI) read the same declarations.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Wake(enum.Enum):
    """What ends a durable wait."""

    TIME = "time"
    EVENT = "event"
    RUNS = "runs"


@dataclass(frozen=True)
class Kind:
    """One kind of recorded operation (see the module docstring for each field)."""

    call: str  # how a body calls it: "sleep", "wait_for"…
    record: str
    serves: str
    wake: Wake | None = None
    in_progress: bool = False
    takes_position: bool = True
    held_back: bool = True


STEP = Kind("step", "", serves="its result, or its error raised")
SLEEP = Kind(
    "sleep", "everystep.sleep", serves="nothing, once its wake time has come", wake=Wake.TIME
)
WAIT_FOR = Kind(
    "wait_for",
    "everystep.wait_for",
    serves="the event's payload, or WaitTimeout raised",
    wake=Wake.EVENT,
    in_progress=True,
)
RESULT = Kind(
    "result",
    "everystep.result",
    serves="the run's outcome (its result, or its failure raised)",
    wake=Wake.RUNS,
    in_progress=True,
)
GATHER = Kind(
    "gather",
    "everystep.gather",
    serves="the runs' outcomes in order",
    wake=Wake.RUNS,
    in_progress=True,
)
START = Kind("start", "everystep.start", serves="the same child run", held_back=False)
PATCHED = Kind("patched", "everystep.patched", serves="the same decision", takes_position=False)

KINDS: tuple[Kind, ...] = (STEP, SLEEP, WAIT_FOR, RESULT, GATHER, START, PATCHED)
_BY_RECORD = {kind.record: kind for kind in KINDS if kind.record}


def of(record: str) -> Kind:
    """The kind of the operation recorded under ``record``: a step if it is not one of
    everystep's names."""
    return _BY_RECORD.get(record, STEP)


def records(*, wake: Wake | None = None, in_progress: bool | None = None) -> tuple[str, ...]:
    """The record names of the kinds woken by ``wake`` (any, if None) whose ``started``
    record is (or is not) a wait in progress, in the table's order."""
    return tuple(
        kind.record
        for kind in KINDS
        if kind.record
        and (wake is None or kind.wake is wake)
        and (in_progress is None or kind.in_progress is in_progress)
    )


def wake_times() -> tuple[str, ...]:
    """The durable waits recorded ``done`` with their wake time as the result."""
    return records(wake=Wake.TIME, in_progress=False)


def deadlines() -> tuple[str, ...]:
    """The durable waits whose ``started`` record holds their deadline (if any)."""
    return records(in_progress=True)
