"""One pass over a claimed run: replay the body, executing what is new, until it
returns or stops; how the pass then ends (finish, wait, requeue, abandon) is
``everystep.engine.core.outcome``'s. Each operation the body reaches takes the path of
``everystep.engine.core.recorded``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from everystep import code_version, conf, registry, signals, tracing
from everystep.engine.asynchronous.offload import offload
from everystep.engine.core.crashes import simulated_crash
from everystep.engine.core.outcome import PassResult, abandon, end_pass, finish, hand_back
from everystep.engine.core.pass_state import AsyncPass, Frame, RunState, Scope, current_frame
from everystep.errors import EverystepError, RunInterrupted, StoreUnavailable, TooManyRecoveries
from everystep.models import FINAL_STATUSES, Status
from everystep.store import database
from everystep.store.outcome import merges_records
from everystep.store.runs import get_run, load_steps
from everystep.values import Claim, Ended


def run_pass(claim: Claim, *, should_drain: Callable[[], bool] = lambda: False) -> PassResult:
    """Replay and advance one claimed run until it reaches an outcome or must stop
    (``everystep.engine.core.outcome`` lists the ways a pass ends).

    ``retry`` means the database could not be reached: the run is still claimed by
    ``claim`` and the caller should run the pass again once the database is back.

    An async body runs on an event loop made for this pass, its database work on this
    thread (so a test's transaction holds it): a worker runs async runs on its own
    loop instead (``arun_pass``).
    """
    try:
        begun = begin_pass(claim, should_drain)
        if isinstance(begun, PassResult):
            return begun
        if begun.defn.is_async:
            from asgiref.sync import async_to_sync

            return async_to_sync(_async_body, force_new_loop=True)(begun)
        return _sync_body(begun)
    except StoreUnavailable as exc:
        return PassResult("retry", exc)


async def arun_pass(
    claim: Claim, *, should_drain: Callable[[], bool] = lambda: False
) -> PassResult:
    """``run_pass`` on the running event loop: the body awaited there, the database work
    on threads (``everystep.engine.asynchronous.offload``). A sync body's pass runs on a thread."""
    try:
        begun = await offload(begin_pass, claim, should_drain)
        if isinstance(begun, PassResult):
            return begun
        if not begun.defn.is_async:
            return await offload(_sync_body, begun)
        return await _async_body(begun)
    except StoreUnavailable as exc:
        return PassResult("retry", exc)


def _sync_body(begun: Begun) -> PassResult:
    began = time.monotonic()
    with _run_span(begun):
        value, outcome = replay(begun.state, begun.defn, begun.state.claim.args)
    return end_begun(begun, began, value, outcome)


async def _async_body(begun: Begun) -> PassResult:
    from everystep.engine.asynchronous.async_body import areplay

    began = time.monotonic()
    with _run_span(begun):
        value, outcome = await areplay(begun.state, begun.defn, begun.state.claim.args)
    return await offload(end_begun, begun, began, value, outcome)


@dataclass
class Begun:
    """A pass ready to run its body: the run's definition and the pass's state."""

    defn: registry.WorkflowDef
    state: RunState


def begin_pass(claim: Claim, should_drain: Callable[[], bool]) -> Begun | PassResult:
    """Everything a pass does before the body: read the run if the claim did not, find
    its definition, refuse it if it must, load its records. A ``PassResult`` if the pass
    ends there."""
    if claim.workflow is None:  # the claim was not read with its run: read it now
        row = get_run(claim.run_id)
        if row is None:
            return abandon(claim, "?", "the run row no longer exists")
        claim = replace(
            claim, workflow=row.name, args=row.args, fresh=False, recoveries=row.recoveries
        )
    name = claim.workflow
    assert name is not None
    defn = registry.definition(name)
    if defn is None and _scheduled_by_other_code(claim):
        # Taken back under this worker's name (a catchup): not its to fail.
        unknown = EverystepError(f"no workflow or task {name!r} in this code")
        return hand_back(claim, name, unknown, left_by=code_version.current())
    refusal = _refusal(claim, name, defn)
    if refusal is not None:
        return finish(claim, name, time.monotonic(), Status.FAILED, exc=refusal)
    assert defn is not None
    state = _new_state(claim, name, should_drain, defn.is_async)
    if defn.begin is not None:
        try:
            state.begun = defn.begin(claim)
        except EverystepError as exc:  # a row its run cannot have (a task's arguments)
            return finish(claim, name, time.monotonic(), Status.FAILED, exc=exc)
        if state.begun is None:
            return abandon(claim, name, "the claim no longer holds the run")
    signals.run_started.emit(
        sender=RunState,
        run_id=claim.run_id,
        workflow=name,
        runner=claim.runner,
        replayed_steps=len(state.records),
    )
    return Begun(defn, state)


def _run_span(begun: Begun) -> Any:
    state = begun.state
    if not state.traced:
        return nullcontext()
    claim = state.claim
    return tracing.span(
        "everystep.workflow", run_id=claim.run_id, workflow=claim.workflow, runner=claim.runner
    )


def end_begun(begun: Begun, began: float, value: Any, outcome: BaseException | None) -> PassResult:
    """End the pass whose body returned ``value`` or raised ``outcome``."""
    state = begun.state
    if not isinstance(outcome, RunInterrupted):
        # everystep.testing's "before_finish": died after the last record, before the outcome.
        outcome = simulated_crash("before_finish", "", state.workflow_name) or outcome
    ended = end_pass(state, began, value, outcome, begun.defn.returns)
    if begun.defn.finished is not None and ended.status in FINAL_STATUSES:
        failure = ended.exc if ended.status != Status.COMPLETED else None
        how = Ended(ended.status, ended.result, ended.at, failure, state.begun)
        begun.defn.finished(state.claim, state.workflow_name, how)
    return ended


def _scheduled_by_other_code(claim: Claim) -> bool:
    """Whether the run was scheduled by another version of the code (a worker claims
    such runs of names it lacks only as a catchup of runs held under its name)."""
    row = get_run(claim.run_id)
    scheduled_by = None if row is None else row.code_version
    return scheduled_by is not None and scheduled_by != code_version.current()


def _refusal(claim: Claim, name: str, defn: registry.WorkflowDef | None) -> EverystepError | None:
    """Why the run fails without running its body, if it must: taken back from dead
    workers too often, or of a workflow this process does not know."""
    limit = conf.max_recoveries()
    if limit and claim.recoveries > limit:
        return TooManyRecoveries(
            f"run {claim.run_id} was taken back from a dead worker {claim.recoveries} "
            f"times (EVERYSTEP_MAX_RECOVERIES = {limit}): something in it most likely "
            "kills the worker running it (os._exit, a crash in native code, running out "
            "of memory); failed so that it stops taking workers down"
        )
    if defn is None:
        return EverystepError(
            f"unknown workflow {name!r}: no @workflow is registered under that name in "
            "this process (renamed or moved code, or a worker running the wrong project)"
            + "".join(f", and it is {why}" for why in registry.why_unknown(name))
        )
    return None


def _new_state(
    claim: Claim, name: str, should_drain: Callable[[], bool], is_async: bool
) -> RunState:
    conn = database.connection()
    return RunState(
        claim=claim,
        workflow_name=name,
        # A fresh run has nothing recorded: no need to ask. An async run's served steps
        # are checked against their calls (``engine.asynchronous.async_steps``): their
        # arguments too.
        records={} if claim.fresh else load_steps(claim.run_id, calls=is_async),
        should_drain=should_drain,
        # Branch threads cannot see the rows of an enclosing, uncommitted transaction
        # (a test wrapped in one), so forks run inline there.
        threads_allowed=not conn.in_atomic_block,
        # Held records assume one writer at a time in the body's own scope; an async
        # body's concurrent awaits in that scope are several.
        holds_records=merges_records(conn) and not is_async,
        traced=tracing.enabled(),
        aio=AsyncPass() if is_async else None,
    )


def replay_here(
    state: RunState, defn: registry.WorkflowDef, args: Any
) -> tuple[Any, BaseException | None]:
    """``replay`` in this thread, for a sync body or an async one (on an event loop made
    for it, its database work brought back to this thread and its transaction). A new
    loop even in a sync view under ASGI, where asgiref would otherwise run the body on
    the server's own loop, which needs no task factory of ours."""
    if not defn.is_async:
        return replay(state, defn, args)
    from asgiref.sync import async_to_sync

    from everystep.engine.asynchronous.async_body import areplay

    return async_to_sync(areplay, force_new_loop=True)(state, defn, args)


def replay(
    state: RunState, defn: registry.WorkflowDef, args: Any
) -> tuple[Any, BaseException | None]:
    """Run the body once over ``state``: its value, or what it raised (None, the outcome).
    A control-flow outcome raised inside the body wins even if the body caught it."""
    outcome: BaseException | None = None
    value: Any = None
    token = current_frame.set(Frame(state, Scope()))
    try:
        value = defn.fn(*defn.arguments(args))
    except (Exception, RunInterrupted, SystemExit) as exc:
        # SystemExit too (a body's sys.exit()): the run fails, its held record written,
        # as for any exception; KeyboardInterrupt still reaches the process.
        outcome = exc
    finally:
        current_frame.reset(token)
    return value, state.aborted or outcome
