"""Waiting for runs to end: ``result()`` and ``gather()`` inside a body.

Inside a running body the wait is durable, written as ``wait_for`` is (one helper,
``everystep.engine.operations.waits.durable``): one recorded operation (``everystep.result`` or
``everystep.gather``) that takes a position. If every awaited run has ended when it is
reached, their outcomes are recorded (``done``) at once; otherwise it records
``started`` (the runs, the deadline) and the pass stops with ``Suspended``: the run is
released, holding no worker slot, until the last of those runs ends
(``everystep.store.run_waits`` wakes it then, once) or the deadline passes. The pass that
finds them ended concludes the record with their outcomes; a deadline passed concludes
it ``failed`` with ``WaitTimeout``. Either way the run's ``RunWait`` rows go with the
record's conclusion (``everystep.store.step_records``). Replays serve the record.

Outside a body the call blocks its caller instead (``everystep.waiting.blocking``, and
``everystep.waiting.waiters`` on an event loop): waiting from outside a run is not the
engine's.

An outcome, as the caller sees it (``value``): a completed run's result; a failed run's
exception, rebuilt as on replay; ``RunStopped`` for a stopped run (its reason and
payload); ``RunCancelled`` for a cancelled one. A ``blocked`` run has not ended: it is
waited through.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from everystep import registry, serde, shapes, stored_errors
from everystep.engine.core import kinds
from everystep.engine.core.pass_state import Frame
from everystep.engine.core.recorded import Operation, reach
from everystep.engine.operations.parallel import raise_failures
from everystep.engine.operations.waits import Awaited, durable, sync_only
from everystep.errors import EverystepError, RunCancelled, RunStopped
from everystep.models import FINAL_STATUSES, Status, Workflow
from everystep.store import run_waits
from everystep.task_framework import is_task_result

RESULT = kinds.RESULT.record
GATHER = kinds.GATHER.record


def run_ids(runs: Sequence[Workflow | uuid.UUID | str | Any], what: str) -> list[uuid.UUID]:
    """The ids of ``runs`` (``Workflow`` rows, a task's ``TaskResult``, or ids), checked."""
    ids = []
    for run in runs:
        value: Any = run.pk if isinstance(run, Workflow) else run
        if is_task_result(value):  # a task's run: its id is the run's
            value = value.id
        try:
            ids.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise EverystepError(
                f"{what}: not a run id (nor a run or a TaskResult): {str(value)[:60]!r}"
            ) from None
    return ids


def listed_ids(runs: Sequence[Workflow | uuid.UUID | str], what: str, one: str) -> list[uuid.UUID]:
    """The ids of a list of runs given to ``what``; one run alone is refused, naming
    ``one``, the call for it."""
    if isinstance(runs, str | bytes | Workflow | uuid.UUID) or is_task_result(runs):
        raise EverystepError(f"{what} takes a list of runs; for one run use {one}")
    return run_ids(list(runs), what)


def values(outcomes: list[dict[str, Any]]) -> list[Any]:
    """What ended runs give their waiter together (``gather``, ``agather``): their
    results in order, or their failures raised."""
    results, failures = [], []
    for outcome in outcomes:
        try:
            results.append(value(outcome))
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise_failures(failures, "gathered runs")
    return results


def value(outcome: dict[str, Any]) -> Any:
    """What an ended run gives its waiter: its result, or its failure raised."""
    status, error = outcome["status"], outcome.get("error") or {}
    if status == Status.COMPLETED:
        try:
            return shapes.decode(
                outcome.get("result"),
                _returns(outcome.get("name")),
                f"the result of run {outcome['run']}",
            )
        except EverystepError:
            raise
        except Exception as exc:  # a value stored before a deploy renamed its type, say
            raise EverystepError(
                f"the result of run {outcome['run']} cannot be rebuilt: {exc!r}"
            ) from exc
    if status == Status.STOPPED:
        raise RunStopped(error.get("reason", error.get("message", "")), _payload(error))
    if status == Status.CANCELLED:
        raise RunCancelled(f"run {outcome['run']} was cancelled: {error.get('message', '')}")
    raise stored_errors.decode_error(error)


def _returns(name: Any) -> shapes.Shape | None:
    """The shape of the result of runs named ``name``: their workflow's (or task's)
    return annotation, in this process's code. An outcome recorded before outcomes
    carried the name is read untyped."""
    if not isinstance(name, str):
        return None
    defn = registry.definition(name)
    return None if defn is None else defn.returns


def _payload(error: dict[str, Any]) -> Any:
    try:
        return serde.decode(error.get("payload"))
    except EverystepError:  # a payload whose type is gone: shown as stored
        return error.get("payload")


def in_body(
    frame: Frame, name: str, ids: list[uuid.UUID], limit: timedelta | None, what: str
) -> list[dict[str, Any]]:
    """The durable wait of ``result()`` (``name``: ``RESULT``) or ``gather()`` reached in
    the sync body of ``frame``."""
    sync_only(frame, what, f"a{what}")
    return awaited_runs(reach(frame, name), ids, limit, what)


def outcomes(ids: list[uuid.UUID], what: str) -> list[dict[str, Any]] | None:
    """The outcomes of ``ids`` in order if all have ended, else None; an unknown id is
    an ``EverystepError``."""
    return ended_outcomes(run_waits.outcomes(ids), ids, what)


def ended_outcomes(
    found: dict[uuid.UUID, tuple[str, Any, Any, str]], ids: list[uuid.UUID], what: str
) -> list[dict[str, Any]] | None:
    """The outcomes of ``ids`` in order if all have ended, else None, from what
    ``run_waits.outcomes`` read; an id it did not find is an ``EverystepError``."""
    missing = [str(run) for run in ids if run not in found]
    if missing:
        raise EverystepError(f"{what}: no run with id {', '.join(missing[:3])}")
    if any(found[run][0] not in FINAL_STATUSES for run in ids):
        return None
    return [
        {
            "run": str(run),
            "status": found[run][0],
            "result": found[run][1],
            "error": found[run][2],
            "name": found[run][3],  # whose return annotation types the result
        }
        for run in ids
    ]


def awaited_runs(
    op: Operation, ids: list[uuid.UUID], limit: timedelta | None, what: str
) -> list[dict[str, Any]]:
    """The durable wait for runs ``ids`` reached as ``op`` (``result``, ``aresult``…)."""
    wanted = [str(run_id) for run_id in ids]

    def look() -> tuple[bool, list[dict[str, Any]] | None]:
        ended = outcomes(ids, what)
        return ended is not None, ended

    awaited = Awaited(
        args=wanted,
        holds={"runs": wanted},
        shown=lambda holds: f"{what} of {_named(holds.get('runs') or [])}",
        look=look,
        timed_out=f"{what}: the awaited runs of run {op.run.run_id} had not ended in time",
        runs=frozenset(ids),
    )
    return list(durable(op, awaited, limit))


def _named(runs: list[str]) -> str:
    """Runs awaited, for a message: a thousand ids are not spelled out."""
    if len(runs) == 1:
        return f"run {runs[0]}"
    return f"{len(runs)} runs" + (f" from {runs[0]}" if runs else "")
