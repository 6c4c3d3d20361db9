"""Child runs: ``start()`` inside a running body.

A child's start is a recorded operation like a step (it takes a position, accepts
``everystep_id=``): a ``done`` record named ``everystep.start`` whose result names the
child (``{"run": id, "workflow": name}``). The child's row is inserted in the
transaction that writes the record (``everystep.store.step_records.record_step``), so a crash
leaves both or neither: a replay finds the record and returns the same child, and no
pass can start a second one.
"""

from __future__ import annotations

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
    frame: Frame, name: str, args: list[Any], idempotency_key: str | None, everystep_id: str | None
) -> Workflow:
    """Start a child run of workflow ``name`` with the encoded ``args`` from the body in
    ``frame``, or return the child an earlier pass started at this position."""
    return started(reach(frame, START, everystep_id=everystep_id), name, args, idempotency_key)


def started(op: Operation, name: str, args: list[Any], idempotency_key: str | None) -> Workflow:
    """The child start reached as ``op`` (``start``, ``astart``)."""
    run = op.run
    if op.decision is Decision.EXECUTE:
        started = record(
            run,
            op.step_id,
            START,
            StepStatus.DONE,
            args=[name, args],
            kwargs={} if idempotency_key is None else {"idempotency_key": idempotency_key},
            child=Child(name, args, idempotency_key),
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
