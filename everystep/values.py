"""Small value types the engine, the store and the worker exchange.

This module imports nothing of everystep or Django, so every layer may import it and
the arrows between layers keep pointing one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class Claim:
    """This worker's claim of one run: every write for the run is fenced by ``token``.

    A claim read with its run carries what the pass needs — the workflow name, the
    decoded arguments, and ``fresh`` (no step recorded yet) — so the pass neither reads
    the run again nor loads steps a fresh run cannot have. ``workflow`` is None when the
    pass must read the run itself.
    """

    run_id: UUID
    token: UUID
    runner: str
    workflow: str | None = field(default=None, compare=False)
    args: Any = field(default=None, compare=False, repr=False)
    fresh: bool = field(default=False, compare=False)
    # Times the run was taken back from a worker that died holding it.
    recoveries: int = field(default=0, compare=False)
    # When the run was due as claimed: for a run that slept or waited, its wake time.
    due_at: Any = field(default=None, compare=False)
    # A Django task's run, as the claim read it (its attempt recorded by the claim); None
    # for other runs, and for claims that do not read it (a catchup's).
    task: TaskClaim | None = field(default=None, compare=False, repr=False)

    def with_task(self, task: TaskClaim | None) -> Claim:
        """This claim, carrying ``task`` (a claim's reading of a task run)."""
        return self if task is None else replace(self, task=task)


@dataclass(frozen=True)
class TaskClaim:
    """What a claim read of a Django task's run, so its pass builds the ``TaskResult``
    without reading the run again (``everystep.task_runs``): its queue and the options
    ``Task.using()`` set, its attempts with this claim's recorded (``new_attempt``: this
    claim began one, rather than resuming after a durable wait), and when it was created
    and first claimed."""

    queue: str
    options: Any
    attempts: list[Any]
    new_attempt: bool
    created_at: Any
    started_at: Any


@dataclass(frozen=True)
class Ended:
    """How a pass ended its run in a final status, for whoever reports it (a task run's
    ``task_finished``, ``registry.WorkflowDef.finished``): the stored result and the time
    written with a ``completed`` outcome, what failed it, and what the pass's ``begin``
    returned (None where the pass did not get that far)."""

    status: str
    result: Any = None
    at: Any = None
    exc: BaseException | None = None
    begun: Any = None


@dataclass(frozen=True)
class Carrying:
    """What a worker can carry on: its code version and the run names it has (its
    workflows and tasks). A claim made with it takes only such runs."""

    code_version: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class RecordedStep:
    """A ``Step`` row as the engine needs it for replay."""

    step_id: str
    name: str
    status: str
    result: Any = None
    error: dict[str, Any] | None = None
    # Its stored ``[args, kwargs]``, loaded for an async run's pass only: there a served
    # step is checked against the call that reaches it (``engine.asynchronous.async_steps``).
    call: Any = field(default=None, compare=False, repr=False)
    # The code version that wrote it (``everystep.code_version``); None if not known.
    code_version: str | None = field(default=None, compare=False)
