"""Small value types the engine, the store and the worker exchange.

This module imports nothing of everystep or Django, so every layer may import it and
the arrows between layers keep pointing one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
