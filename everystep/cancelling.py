"""``everystep.cancel()``: cancelling a run from code, as ``everystep_cancel`` does.
Below ``api`` and ``async_api``, which both offer it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uuid import UUID

    from everystep.models import Workflow


def cancel(run: Workflow | UUID | str, reason: str | None = None) -> Workflow:
    """Cancel ``run`` (a run, or its id) and its unfinished children, as
    ``everystep_cancel`` does: a scheduled or blocked run ends ``cancelled`` at once, a
    running one too — its worker's next write is refused, so the step in flight may have
    had its effect but nothing more runs. The audit trail records it, with ``reason``.
    Commits at once. Returns the run, refreshed. ``EverystepError`` for an unknown run or
    one already finished. In a workflow body, call it from a step (its effect, like any
    other, belongs in one)."""
    from everystep.engine.operations.results import run_ids
    from everystep.store.audit import Actor
    from everystep.store.runs import cancel_run
    from everystep.sync_callers import refuse_on_event_loop

    refuse_on_event_loop("cancel()", "await acancel()")
    (run_id,) = run_ids([run], "cancel()")
    return cancel_run(str(run_id), actor=Actor("code", "everystep.cancel"), reason=reason or "")
