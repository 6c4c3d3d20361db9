"""The one exceptions module of everystep.

``EverystepError`` is the root of every error the library raises on purpose.
``RunInterrupted`` is deliberately *not* an ``Exception``: it carries internal
control flow (drain at a step boundary, a lost claim, a simulated crash) through
user code, and a workflow body's ``except Exception:`` must not be able to
swallow it.
"""

from __future__ import annotations

from typing import Any


class EverystepError(Exception):
    """Misuse of the library: a bad step id, data that cannot be serialized, bad arguments."""


class WorkflowCodeError(EverystepError):
    """Replay found a different step function at a recorded step id: the code changed
    incompatibly since the run recorded it.

    ``step_id``, ``recorded`` and ``called`` say where and what, for the replay check's
    report; they are not stored (a replayed error is rebuilt from its message).
    """

    def __init__(
        self,
        message: str,
        *,
        step_id: str | None = None,
        recorded: str | None = None,
        called: str | None = None,
    ) -> None:
        super().__init__(message)
        self.step_id = step_id
        self.recorded = recorded
        self.called = called


class IncompatibleValue(WorkflowCodeError):
    """A stored value the code's annotated type cannot rebuild any more (a field added
    without a default, a renamed Enum member): the type changed incompatibly since the
    value was stored (``docs/typed-values.md``)."""


class StepFailure(EverystepError):
    """A recorded step exception whose original type cannot be rebuilt on replay.

    ``original_type`` is the qualified name of the exception that was recorded.
    """

    def __init__(self, message: str, original_type: str | None = None) -> None:
        super().__init__(message, original_type)
        self.message = message
        self.original_type = original_type

    def __str__(self) -> str:
        return self.message


class EffectUncertain(EverystepError):
    """An ``unsafe_to_repeat`` step started but its outcome was never recorded; a human
    must settle it with ``everystep_resolve_step`` before the run can go on."""

    def __init__(self, message: str, step_id: str | None = None) -> None:
        super().__init__(message, step_id)
        self.message = message
        self.step_id = step_id

    def __str__(self) -> str:
        return self.message


class _Stop(EverystepError):
    """A deliberate stop: its ``reason`` (its text) and ``payload``."""

    def __init__(self, reason: str, payload: Any = None) -> None:
        super().__init__(reason, payload)
        self.reason = reason
        self.payload = payload

    def __str__(self) -> str:
        return self.reason


class Terminal(_Stop):
    """Raised by a step or a workflow body to stop the run deliberately.

    The run ends ``stopped`` with ``reason`` and ``payload`` stored. It is an
    outcome, not a failure: it is never reported to Sentry.
    """


class TablesMissing(EverystepError):
    """The database has no everystep tables (or lacks some): the project's migrations
    were not applied to it. ``python manage.py migrate`` creates them."""


class WaitTimeout(EverystepError):
    """A wait reached its timeout first: ``wait_for(name, timeout=…)`` before the event
    was sent, ``result(run, timeout=…)``/``gather(…)`` before the runs ended."""


class RunStopped(_Stop):
    """``result()``/``gather()`` of a run that ended ``stopped`` (``Terminal``): its
    ``reason`` and ``payload``, as the run recorded them. Not a ``Terminal``: the run
    that waited goes on (or fails) as its body decides."""


class UnstorableValue(EverystepError, TypeError):
    """A value of a type everystep cannot store (an argument, a step's result, a published
    value): a ``TypeError`` too, as JSON's own refusal is, so a Django task whose return
    value cannot be stored fails with an error that is one, as on Django's backends."""


class RunCancelled(EverystepError):
    """``result()``/``gather()`` of a run that was cancelled."""


class TooManyRecoveries(EverystepError):
    """The run was taken back from dead workers more than ``EVERYSTEP_MAX_RECOVERIES``
    times: something in it (a step calling ``os._exit``, a segfault, running out of
    memory) most likely kills the worker that runs it, so it is failed instead."""


class NameInUse(EverystepError):
    """A worker was refused its runner name: another live process sends heartbeats under
    it. Names must be unique among live workers, since a worker starting under a name
    takes back every run left under it. ``name``, and ``host`` and ``pid`` of the process
    holding it (``None`` when a worker of an older release wrote its row)."""

    def __init__(self, name: str, host: str | None, pid: int | None, detail: str) -> None:
        self.name, self.host, self.pid = name, host, pid
        super().__init__(
            f"runner name {name!r} is in use by a live worker on host {host or '?'}, "
            f"pid {pid or '?'} ({detail}): runner names must be unique among live "
            "workers; stop that worker or give this one another name"
        )


class RunInterrupted(BaseException):
    """Internal: this pass must stop now without deciding the run's outcome.

    Raised at a step boundary when the worker drains, when this worker's claim on the
    run was lost (fencing), or by ``everystep.testing`` to simulate a crash. A
    ``BaseException`` so that ``except Exception`` in user code lets it through.
    """


class Suspended(RunInterrupted):
    """Internal: the run waits (a sleep, an event, other runs); release it until ``due``
    (None: until one of ``events`` is sent or the last of ``runs`` ends). Raised where
    the wait is replayed; the pass ends there."""

    def __init__(
        self, due: Any, events: frozenset[str] = frozenset(), runs: frozenset[Any] = frozenset()
    ) -> None:
        super().__init__(f"waiting until {due}" if due is not None else "waiting")
        self.due = due
        self.events = events
        self.runs = runs


class ReachedNewWork(RunInterrupted):
    """Internal: a replay check (``everystep_check_replay``) reached a step or a wait with
    no record. Everything before it replayed against the installed code; what follows
    would be new work, which a check never does. (A patch with no record is decided, not
    recorded, so the check follows the run down the branch a worker would take.)"""

    def __init__(self, step_id: str) -> None:
        super().__init__(f"replay reached step {step_id}, which has no record")
        self.step_id = step_id


class DrainRequested(RunInterrupted):
    """Internal: the worker is shutting down; requeue the run at this step boundary."""


class ClaimLost(RunInterrupted):
    """Internal: another claim owns the run now; this pass must not write anything more."""


class SimulatedCrash(RunInterrupted):
    """Raised by ``everystep.testing.crash_after``: the process "died" between a step's
    side effect and its record."""


class StoreUnavailable(RunInterrupted):
    """Internal: the database could not be reached while reading or recording for a run.

    Nothing was decided: the run stays claimed by this worker, which runs the pass again
    once the database is back. A step whose record did not land runs again then (steps
    run at least once).
    """


class AlreadyRecorded(ClaimLost):
    """Internal: a step this pass was about to record is recorded already: an earlier
    pass recorded it, or a newer claimer did. Either way this pass saw stale records;
    if it still holds the run, the run is requeued so that a fresh pass replays it."""


class RunGone(ClaimLost):
    """Internal: the run's row no longer exists (deleted while it was being executed)."""


class WorkflowNotDiscoveredWarning(UserWarning):
    """``schedule()`` or ``start()`` of a workflow that workers would not know, in Django's
    test environment: its module is neither an installed app's ``workflows`` module (nor
    imported by one) nor in ``EVERYSTEP_WORKFLOW_MODULES``. Outside tests the same case
    raises ``EverystepError``; in tests a workflow defined in a test module is common,
    and ``everystep.testing.run_due()`` runs it in the test process, so it only warns."""


__all__ = [
    "AlreadyRecorded",
    "ClaimLost",
    "DrainRequested",
    "EffectUncertain",
    "EverystepError",
    "ReachedNewWork",
    "RunCancelled",
    "RunGone",
    "RunInterrupted",
    "RunStopped",
    "SimulatedCrash",
    "StepFailure",
    "StoreUnavailable",
    "Suspended",
    "TablesMissing",
    "Terminal",
    "TooManyRecoveries",
    "WaitTimeout",
    "WorkflowCodeError",
    "WorkflowNotDiscoveredWarning",
]
