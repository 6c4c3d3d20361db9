"""A waiting run's wait in words, the one wording of the worker's log line, the
commands' ``wait`` and the stored ``waiting_for`` text: "sleeps until T", "waits for
event approval until T", "waits for run ID", "waits for 3 runs"."""

from __future__ import annotations

import re
from collections.abc import Collection

# How ``waiting_for`` ends when the run awaits runs (``result``, ``gather``), after the
# events it awaits, if any: "run <id>" for one run, "<n> runs" for several.
_AWAITED_RUNS = re.compile(r"(?:^|, )(run [0-9a-f-]{36}|[0-9]+ runs)$")


def awaited(events: Collection[str], runs: Collection[object]) -> str:
    """What a run waits for, as its ``waiting_for`` keeps it: the events' names, sorted,
    then "run <id>" for one run or "<n> runs" for several ("" for neither)."""
    said = sorted(events)
    if len(runs) == 1:
        said.append(f"run {next(iter(runs))}")
    elif runs:
        said.append(f"{len(runs)} runs")
    return ", ".join(said)


def in_words(kind: str, until: str, waiting_for: str) -> str:
    """The wait of ``kind`` (``start``, ``sleep``, or ``event`` for any wait on events or
    runs) that ends at ``until`` ("": only what it awaits ends it), ``waiting_for`` the
    text ``awaited`` made: "starts at T", "sleeps until T", "waits for event approval
    until T", "waits for run ID", "waits for events a, b and 3 runs"."""
    if kind == "start":
        return f"starts at {until}"
    if kind == "sleep":
        return f"sleeps until {until}"
    return f"waits for {_listed(waiting_for)}" + (f" until {until}" if until else "")


def _listed(waiting_for: str) -> str:
    runs = _AWAITED_RUNS.search(waiting_for)
    events = waiting_for if runs is None else waiting_for[: runs.start()]
    noun = "events" if "," in events else "event"
    said = [f"{noun} {events}"] if events else []
    said += [runs.group(1)] if runs is not None else []
    return " and ".join(said) or "an event"
