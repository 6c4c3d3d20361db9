"""``parallel()``: run branches concurrently, each in its own step-id scope.

Threads are bounded process-wide: a branch gets its own thread only if a slot is free
right now, otherwise it runs in the forking thread after the first branch. That keeps
nested forks from multiplying threads and can never deadlock (no thread ever waits for
a slot). Every branch thread closes its database connections before it ends.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from django.db import connections

from everystep import conf, tracing
from everystep.engine.core.pass_state import Frame, Scope, current_frame
from everystep.engine.core.recorded import flush
from everystep.errors import (
    EffectUncertain,
    EverystepError,
    RunInterrupted,
    Suspended,
    Terminal,
    WorkflowCodeError,
)

Branch = Callable[[], Any] | Sequence[Callable[[], Any]]

_slots_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None

# Control flow wins over ordinary errors, in this order.
_PRECEDENCE: tuple[type[BaseException], ...] = (
    RunInterrupted,
    WorkflowCodeError,
    EffectUncertain,
    Terminal,
)


def _thread_slots() -> threading.BoundedSemaphore:
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(conf.fork_threads())
        return _slots


def _normalize(branches: tuple[Branch, ...]) -> list[Branch]:
    if not branches:
        raise ValueError("parallel() needs at least one branch")
    for index, branch in enumerate(branches):
        if isinstance(branch, list | tuple):
            if not branch:
                raise ValueError(f"parallel() branch {index} is an empty sequence")
            for pos, item in enumerate(branch):
                if not callable(item):
                    raise TypeError(
                        f"parallel() branch {index} element {pos} is not callable: {item!r}"
                    )
        elif not callable(branch):
            raise TypeError(f"parallel() branch {index} is not callable: {branch!r}")
    return list(branches)


def parallel(*branches: Branch, everystep_id: str | None = None) -> tuple[Any, ...]:
    """Run ``branches`` concurrently; return their results as a tuple in branch order."""
    plan = _normalize(branches)
    frame = current_frame.get()
    if frame is not None and not frame.in_step and frame.run.is_async:
        raise frame.run.abort(
            EverystepError(
                "parallel() cannot be called in an async workflow body: await the steps "
                "together with asyncio.gather() or an asyncio.TaskGroup"
            )
        )
    fork_id: str | None = None
    if frame is None or frame.in_step:
        frames: list[Frame | None] = [None] * len(plan)
        threads_allowed = True
    else:
        fork_id = frame.next_id(everystep_id)
        flush(frame.run)  # branches never hold records back: see ``recorded.record``
        frames = [Frame(frame.run, Scope(f"{fork_id}.{i}.")) for i in range(len(plan))]
        threads_allowed = frame.run.threads_allowed
    results: list[Any] = [None] * len(plan)
    errors: list[BaseException | None] = [None] * len(plan)

    def run_branch(index: int) -> None:
        current_frame.set(frames[index])
        branch = plan[index]
        try:
            if callable(branch):
                results[index] = branch()
            else:
                results[index] = tuple(item() for item in branch)
        except BaseException as exc:  # every branch runs to completion; sorted out below
            errors[index] = exc

    if fork_id is None or frame is None or not frame.run.traced:
        _run_all(len(plan), run_branch, threads_allowed)
    else:
        with tracing.span(
            "everystep.fork", run_id=frame.run.run_id, fork_id=fork_id, branches=len(plan)
        ):
            _run_all(len(plan), run_branch, threads_allowed)
    return _joined(results, errors)


def _run_all(count: int, run_branch: Callable[[int], None], threads_allowed: bool) -> None:
    slots = _thread_slots()
    threads: list[threading.Thread] = []
    inline: list[int] = [0]
    for index in range(1, count):
        if threads_allowed and slots.acquire(blocking=False):
            ctx = contextvars.copy_context()
            thread = threading.Thread(
                target=_in_thread,
                args=(ctx, run_branch, index, slots),
                name=f"everystep-fork-{index}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        else:
            inline.append(index)
    for index in inline:
        contextvars.copy_context().run(run_branch, index)
    for thread in threads:
        thread.join()


def _in_thread(
    ctx: contextvars.Context,
    run_branch: Callable[[int], None],
    index: int,
    slots: threading.BoundedSemaphore,
) -> None:
    try:
        ctx.run(run_branch, index)
    finally:
        # Django connections are per thread: without this every branch leaks one.
        connections.close_all()
        slots.release()


def _joined(results: list[Any], errors: list[BaseException | None]) -> tuple[Any, ...]:
    """The fork's result once every branch has run: the branches' results, or what
    they raised, in order of precedence; a fork with a branch still waiting waits."""
    raised = [exc for exc in errors if exc is not None]
    if not raised:
        return tuple(results)
    waits = [exc for exc in raised if isinstance(exc, Suspended)]
    raised = [exc for exc in raised if not isinstance(exc, Suspended)]
    for kind in _PRECEDENCE:
        for exc in raised:
            if isinstance(exc, kind):
                raise exc
    if waits:
        # Branches still waiting: the fork is not over, and the errors of the others are
        # recorded and will be re-raised by the pass that completes it.
        raise waits_together(waits)
    raise_failures(raised, "parallel branches")


def waits_together(waits: Sequence[Suspended]) -> Suspended:
    """Several waits reached on one pass, as the one the run is released with: until the
    first is due, for any event one awaits, or until every run they await has ended."""
    dues = [exc.due for exc in waits if exc.due is not None]
    return Suspended(
        min(dues) if dues else None,
        frozenset().union(*(w.events for w in waits)),
        frozenset().union(*(w.runs for w in waits)),
    )


def raise_failures(raised: Sequence[BaseException], what: str) -> NoReturn:
    """Raise what several failed together as the caller sees it: one failure itself,
    several as an ``ExceptionGroup`` (``what``: of what, for its message); a
    ``KeyboardInterrupt`` or ``SystemExit`` first, since the process is ending."""
    for exc in raised:
        if not isinstance(exc, Exception):
            raise exc
    if len(raised) == 1:
        raise raised[0]
    raise ExceptionGroup(f"{len(raised)} {what} failed", list(raised))  # type: ignore[type-var]
