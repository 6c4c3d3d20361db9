"""An ``async def`` body's replay: awaited on an event loop, its tasks each in a scope.

Step ids must be the same on every pass, and in an async body awaits interleave by
timing. Two rules make the ids independent of that order:

- an operation (a step call, a wait, a child start) takes its id when it is *called*
  (``everystep.engine.asynchronous.async_ops``), and one task's calls happen in its own
  code's order;
- a task created in a body (``asyncio.gather`` of coroutines, ``create_task``, a
  ``TaskGroup``) takes the next position of its creator's scope when it is created, and
  its own operations are numbered in a scope of their own under it (``3.0.1``,
  ``3.0.2``…), as a ``parallel()`` branch's are. A task made of one operation only
  (``asyncio.gather(charge(a), charge(b))``) needs no scope: the operation has its id.

So what could still differ between passes is a body whose path depends on which await
finished first. ``asyncio.wait`` and ``asyncio.as_completed`` exist to do that: they are
refused in a body (use ``asyncio.gather`` or a ``TaskGroup``, which keep call order).
Other timing-dependent code (a shared list appended in completion order) is caught when
a served step is called with other arguments than it was recorded with
(``everystep.engine.asynchronous.async_steps``): ``WorkflowCodeError``, never another call's result.

The pass ends when the body does; tasks of the body still running then may finish the
operation they are in, and start no other.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

from everystep.engine.asynchronous.async_ops import handed_over
from everystep.engine.asynchronous.asyncio_internals import reports_by_completion
from everystep.engine.core.pass_state import Frame, RunState, Scope, current_frame
from everystep.engine.operations.parallel import waits_together
from everystep.errors import EverystepError, RunInterrupted, Suspended
from everystep.registry import WorkflowDef


class PassOver(RunInterrupted):
    """Internal: the body has ended; a task it left running starts nothing more."""


class BodyTask(asyncio.Task[Any]):
    """A task created in a running body (see the module docstring)."""

    run: RunState

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        if reports_by_completion(fn):
            raise self.run.abort(
                EverystepError(
                    f"run {self.run.run_id}: asyncio.wait() and asyncio.as_completed() "
                    "cannot wait for a workflow body's tasks: which finishes first depends "
                    "on timing, and a replay could take another path. Await them in an "
                    "order the code fixes: asyncio.gather() or an asyncio.TaskGroup"
                )
            )
        super().add_done_callback(fn, context=context)


def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """The task factory of every loop that runs bodies: a task created in a body gets
    the next position of its creator's scope, and a scope of its own under it."""
    frame = current_frame.get()
    if frame is None or frame.in_step or not frame.run.is_async:
        return asyncio.Task(coro, loop=loop, **kwargs)
    run = frame.run
    if not handed_over(coro):
        context = kwargs.pop("context", None)
        context = contextvars.copy_context() if context is None else context.copy()
        scope = Scope(f"{frame.next_id(None)}.0.")
        context.run(current_frame.set, Frame(run, scope))
        kwargs["context"] = context
    task = BodyTask(coro, loop=loop, **kwargs)
    task.run = run
    run.async_pass.tasks.append(task)
    return task


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop`` number its bodies' tasks (``task_factory``)."""
    current = loop.get_task_factory()
    if current is task_factory:
        return
    if current is not None:
        raise EverystepError(
            "an async workflow body cannot run on an event loop with a task factory of "
            "its own: everystep numbers the tasks a body creates"
        )
    loop.set_task_factory(task_factory)


async def areplay(
    state: RunState, defn: WorkflowDef, args: Any
) -> tuple[Any, BaseException | None]:
    """Await the body once over ``state``: its value, or what it raised (None, the
    outcome), as ``execute.replay`` for a sync body."""
    install(asyncio.get_running_loop())
    outcome: BaseException | None = None
    value: Any = None
    token = current_frame.set(Frame(state, Scope()))
    try:
        body: Coroutine[Any, Any, Any] = defn.fn(*defn.arguments(args))
        value = await body
    except (Exception, RunInterrupted, SystemExit) as exc:
        # SystemExit too (a body's sys.exit()): the run fails, its held record written,
        # as for any exception; KeyboardInterrupt still reaches the process.
        outcome = exc
    finally:
        current_frame.reset(token)
    await _left_running(state)
    if outcome is None and state.aborted is None and state.async_pass.unawaited:
        outcome = state.abort(_forgotten(state))
    outcome = state.aborted or outcome
    if isinstance(outcome, Suspended):
        outcome = waits_together([outcome, *state.async_pass.suspensions])
    return value, outcome


async def _left_running(state: RunState) -> None:
    """End the tasks the body left running: one inside an operation may finish it (its
    record is written, under the claim) and starts no other; one awaiting anything else
    is cancelled, so that nothing the body forgot holds the pass."""
    pending = [task for task in state.async_pass.tasks if not task.done()]
    if not pending:
        return
    aborted = state.aborted
    state.abort(PassOver("the workflow body has ended"))
    for task in pending:
        if task not in state.async_pass.busy:
            task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    state.aborted = aborted


def _forgotten(state: RunState) -> EverystepError:
    step_id, name = next(iter(state.async_pass.unawaited.items()))
    return EverystepError(
        f"run {state.run_id}: {name} was called at step {step_id} and never awaited: in "
        "an async body, await every step call and wait (a sync @step too)"
    )
