"""A ``@step`` called from an ``async def`` body: an awaitable, whose id is taken at the
call.

An async step's body is awaited on the run's event loop; a sync step's body runs on a
thread (``offload``), atomic steps included, since their transaction is the thread's.
Either way the decisions and records are the sync path's own (``everystep.engine.steps``).

A served record is checked against the call that reaches it: the same step with other
arguments means the body reached its ids in another order than the pass that recorded
them (concurrent awaits whose order depended on timing), and the run fails with
``WorkflowCodeError`` rather than hand one call's result to another.

A step body cancelled while it runs (``asyncio.timeout`` around it, a ``TaskGroup``
whose sibling failed) records nothing, as if the process had died there: its next
pass runs it again, and an unsafe step's ``started`` record blocks the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from everystep import serde
from everystep.engine.asynchronous.async_ops import issue
from everystep.engine.asynchronous.offload import offload
from everystep.engine.core.pass_state import Frame, current_frame
from everystep.engine.core.recorded import Operation, code_changed, reach
from everystep.engine.core.replay import Decision
from everystep.engine.operations.step_run import (
    begin_step,
    execute_step,
    failed_outcome,
    served_step,
    step_span,
    value_outcome,
)
from everystep.errors import EverystepError
from everystep.registry import StepDef
from everystep.store.database import close_broken


def call_async(
    frame: Frame,
    defn: StepDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    everystep_id: str | None,
) -> Coroutine[Any, Any, Any]:
    """The step call ``defn(*args, **kwargs)`` in an async body: its id now, its work
    when awaited."""
    op = reach(frame, defn.name, everystep_id=everystep_id)
    work: Callable[[], Awaitable[Any]]
    if op.decision is not Decision.EXECUTE:
        _check_call(op, defn, args, kwargs)
        work = _served(op, defn)
    elif defn.is_async:
        work = _executed_async(frame, defn, op.step_id, args, kwargs)
    else:
        work = _executed_on_thread(frame, defn, op.step_id, args, kwargs)
    return issue(work, op)


def _check_call(
    op: Operation, defn: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    recorded = op.recorded
    if recorded is None or recorded.call is None:
        return
    try:
        now = [
            serde.encode(list(args), allowed=serde.EVERYTHING),
            serde.encode(kwargs, allowed=serde.EVERYTHING),
        ]
    except EverystepError:
        return  # the arguments cannot be stored: the record was not made by this call
    if _same(now, recorded.call):
        return
    run = op.run
    error = code_changed(
        run, op.step_id, f"{defn.name}{_shown(recorded.call)}", f"{defn.name}{_shown(now)}"
    )
    error.args = (
        f"{error.args[0]}: the same step with other arguments (the code changed what it "
        "passes, or concurrent awaits reached this id in another order than on the pass "
        "that recorded it, the body's path depending on which await finished first)",
    )
    raise run.abort(error)


def _same(now: Any, stored: Any) -> bool:
    """Whether encoded arguments equal the stored ones (a JSON column may hand back
    dict keys in another order, and dicts compare without order)."""
    return bool(now == stored)


def _shown(call: Any) -> str:
    text = repr(call)
    return f"({text[:80]}…)" if len(text) > 80 else f"({text})"


def _served(op: Operation, defn: StepDef) -> Callable[[], Awaitable[Any]]:
    async def work() -> Any:
        return served_step(op, defn)

    return work


def _executed_on_thread(
    frame: Frame, defn: StepDef, step_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Awaitable[Any]]:
    def work() -> Awaitable[Any]:
        return offload(execute_step, frame, defn, step_id, args, kwargs)

    return work


def _executed_async(
    frame: Frame, defn: StepDef, step_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Awaitable[Any]]:
    async def work() -> Any:
        run = frame.run
        if defn.unsafe_to_repeat:  # its ``started`` record is written first: a thread's work
            values = await offload(begin_step, frame, defn, step_id, args, kwargs)
        else:  # nothing to write (an async run holds no record back): no thread needed
            values = begin_step(frame, defn, step_id, args, kwargs)
        began = time.monotonic()
        token = current_frame.set(Frame(run, frame.scope, step_id))
        try:
            with step_span(run, step_id, defn.name):
                value = await defn.fn(*args, **kwargs)
        except asyncio.CancelledError:
            raise  # recorded nothing: see the module docstring
        except BaseException as exc:
            if isinstance(exc, DatabaseError):
                # The connection of Django's thread for sync code (its async ORM's)
                # may be broken for good: closed here, the step's next run reconnects.
                await sync_to_async(close_broken)()
            raised, _ = await offload(failed_outcome, run, defn, values, began, exc)
            # What a replay raises: the exception itself, or its stand-in with the
            # original as its cause (set by failed_outcome).
            raise raised  # noqa: B904
        finally:
            current_frame.reset(token)
        failed, result = await offload(value_outcome, run, defn, values, began, value)
        if failed is not None:
            raise failed
        return result

    return work
