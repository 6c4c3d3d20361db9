"""Child runs: ``start()`` inside a running body, and every other way a body starts a
run — ``schedule()``, a Django task's ``enqueue()`` — which would otherwise insert
another run on every replay.

A child's start is a recorded operation like a step (it takes a position, accepts
``everystep_id=``): a ``done`` record named ``everystep.start`` whose result names the
child (``{"run": id, "workflow": name}``). The child's row is inserted in the
transaction that writes the record (``everystep.store.step_records.record_step``), so a crash
leaves both or neither: a replay finds the record and returns the same child, and no
pass can start a second one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from everystep import conf
from everystep.engine.core import kinds
from everystep.engine.core.pass_state import Frame
from everystep.engine.core.recorded import Operation, code_changed, reach, record
from everystep.engine.core.replay import Decision
from everystep.models import StepStatus, Workflow
from everystep.store.step_records import Child

START = kinds.START.record


def start(
    frame: Frame,
    name: str,
    args: list[Any],
    idempotency_key: str | None,
    everystep_id: str | None,
    *,
    due_at: datetime | None = None,
) -> Workflow:
    """Start a child run of workflow ``name`` with the encoded ``args`` from the body in
    ``frame``, due at ``due_at`` (now if None), or return the child an earlier pass
    started at this position."""
    op = reach(frame, START, everystep_id=everystep_id)
    return started(op, Child(name, args, idempotency_key, due_at=due_at))


def started(op: Operation, child: Child) -> Workflow:
    """The start of ``child`` reached as ``op`` (``start``, ``astart``, and the
    ``schedule``, ``enqueue`` and their async twins a body calls)."""
    run, name = op.run, child.name
    if op.decision is Decision.EXECUTE:
        key = child.idempotency_key
        started = record(
            run,
            op.step_id,
            START,
            StepStatus.DONE,
            args=[name, child.args],
            kwargs={} if key is None else {"idempotency_key": key},
            child=child,
        ).result
    else:
        assert op.recorded is not None and op.decision is Decision.SERVE_RESULT
        started = op.recorded.result
        if started["workflow"] != name:
            raise run.abort(
                code_changed(run, op.step_id, f"start({started['workflow']})", f"start({name})")
            )
    return handle(UUID(started["run"]), name, run.run_id)


def handle(run_id: UUID, name: str, parent: UUID | None) -> Workflow:
    """The child as a ``Workflow`` without reading it: its id, name and parent are
    known; any other field is read from the database when first used."""
    return Workflow.from_db(conf.database(), ["id", "name", "parent_id"], [run_id, name, parent])
