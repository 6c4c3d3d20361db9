"""Simulated crashes for tests (``everystep.testing.crash_at``, ``crash_after``).

Crash points are installed by tests; each is asked ``point(where, step_id, name)``
whether the process "dies" there. ``where``: "before_body" (an unsafe step's started
row is committed), "after_body" (the step's body returned or raised, its outcome is not
recorded), "after_record" (any recorded operation's record is committed: a step's, a
wait's, a child's start), and "before_finish" (the body is done, the run's outcome is
not written; step id "", the workflow's name). With none installed, asking costs one
list check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from everystep.errors import SimulatedCrash

CrashPoint = Callable[[str, str, str], bool]
_crash_points: list[CrashPoint] = []
_crash_lock = threading.Lock()


def add_crash_point(point: CrashPoint) -> None:
    with _crash_lock:
        _crash_points.append(point)


def remove_crash_point(point: CrashPoint) -> None:
    with _crash_lock:
        _crash_points.remove(point)


def armed() -> bool:
    """Whether a test installed any crash point."""
    return bool(_crash_points)


def simulated_crash(where: str, step_id: str, name: str) -> SimulatedCrash | None:
    """The crash an installed crash point asks for at ``where``, or None (always, and
    at the cost of one list check, when no test installed any)."""
    if not _crash_points:  # the usual case, read without the lock: tests add points
        return None
    with _crash_lock:
        points = list(_crash_points)
    if any(point(where, step_id, name) for point in points):
        what = f"step {step_id} ({name})" if step_id else f"run of {name}"
        return SimulatedCrash(f"simulated crash at {where} of {what}")
    return None


def maybe_crash(step_id: str, name: str, where: str = "after_body") -> None:
    """Raise the crash an installed crash point asks for at ``where``, if any."""
    crash = simulated_crash(where, step_id, name)
    if crash is not None:
        raise crash
