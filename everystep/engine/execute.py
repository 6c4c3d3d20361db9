"""One pass over a claimed run: replay the body, execute what is new, record the outcome.

A pass ends in exactly one of:

- ``completed`` / ``failed`` / ``stopped`` / ``blocked``: the outcome is written, fenced
  by the claim;
- ``requeued``: the worker is draining; the run goes back to ``scheduled``;
- ``waiting``: the body sleeps or waits for an event; the run is ``scheduled`` again,
  due when the wait ends (or when the event is sent);
- ``abandoned``: nothing more may be written (claim lost, row deleted, simulated
  crash); whoever holds the run now decides its fate;
- ``retry``: the database could not be reached; the run is still claimed and the
  pass must be run again once the database is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from everystep import (
    conf,
    failure_detail,
    registry,
    safe_text,
    serde,
    signals,
    stored_errors,
    tracing,
)
from everystep.engine.crashes import simulated_crash
from everystep.engine.pass_state import Frame, RunState, Scope, current_frame
from everystep.engine.recorded import announce, flush, take_held
from everystep.errors import (
    AlreadyRecorded,
    ClaimLost,
    DrainRequested,
    EffectUncertain,
    EverystepError,
    RunInterrupted,
    StoreUnavailable,
    Suspended,
    Terminal,
    TooManyRecoveries,
)
from everystep.models import Status
from everystep.store import database
from everystep.store.fenced import finish_run, merges_records, requeue_run, suspend_run
from everystep.store.runs import get_run, load_steps
from everystep.values import Claim

logger = logging.getLogger("everystep.engine")


@dataclass(frozen=True)
class PassResult:
    """How one pass over a run ended."""

    status: str  # a run status, or "requeued" / "abandoned" / "retry"
    exc: BaseException | None = None


def run_pass(claim: Claim, *, should_drain: Callable[[], bool] = lambda: False) -> PassResult:
    """Replay and advance one claimed run until it reaches an outcome or must stop.

    ``retry`` means the database could not be reached: the run is still claimed by
    ``claim`` and the caller should run the pass again once the database is back.
    """
    try:
        return _run_pass(claim, should_drain)
    except StoreUnavailable as exc:
        return PassResult("retry", exc)


def _run_pass(claim: Claim, should_drain: Callable[[], bool]) -> PassResult:
    if claim.workflow is None:  # the claim was not read with its run: read it now
        row = get_run(claim.run_id)
        if row is None:
            return _abandon(claim, "?", "the run row no longer exists")
        claim = replace(
            claim, workflow=row.name, args=row.args, fresh=False, recoveries=row.recoveries
        )
    name = claim.workflow
    assert name is not None
    limit = conf.max_recoveries()
    if limit and claim.recoveries > limit:
        return _finish(
            claim,
            name,
            time.monotonic(),
            Status.FAILED,
            exc=TooManyRecoveries(
                f"run {claim.run_id} was taken back from a dead worker {claim.recoveries} "
                f"times (EVERYSTEP_MAX_RECOVERIES = {limit}): something in it most likely "
                "kills the worker running it (os._exit, a crash in native code, running out "
                "of memory); failed so that it stops taking workers down"
            ),
        )
    defn = registry.lookup(name)
    if defn is None:
        return _finish(
            claim,
            name,
            time.monotonic(),
            Status.FAILED,
            exc=EverystepError(
                f"unknown workflow {name!r}: no @workflow is registered under that name in "
                "this process (renamed or moved code, or a worker running the wrong project)"
            ),
        )
    conn = database.connection()
    state = RunState(
        claim=claim,
        workflow_name=name,
        # A fresh run has nothing recorded: no need to ask.
        records={} if claim.fresh else load_steps(claim.run_id),
        should_drain=should_drain,
        # Branch threads cannot see the rows of an enclosing, uncommitted transaction
        # (a test wrapped in one), so forks run inline there.
        threads_allowed=not conn.in_atomic_block,
        holds_records=merges_records(conn),
        traced=tracing.enabled(),
    )
    signals.run_started.emit(
        sender=RunState,
        run_id=claim.run_id,
        workflow=name,
        runner=claim.runner,
        replayed_steps=len(state.records),
    )
    began = time.monotonic()
    with (
        tracing.span("everystep.workflow", run_id=claim.run_id, workflow=name, runner=claim.runner)
        if state.traced
        else nullcontext()
    ):
        value, outcome = replay(state, defn, claim.args)
    if not isinstance(outcome, RunInterrupted):
        # everystep.testing's "before_finish": died after the last record, before the outcome.
        outcome = simulated_crash("before_finish", "", name) or outcome
    if outcome is None:
        try:
            result = serde.encode(value, f"result of workflow {name}")
        except EverystepError as exc:
            outcome = exc
        else:
            return _finish(claim, name, began, Status.COMPLETED, result=result, state=state)
    if isinstance(outcome, Suspended | DrainRequested | AlreadyRecorded):
        outcome = _flushed(state, outcome)
    return _settle(claim, name, began, outcome, state)


def _flushed(state: RunState, outcome: RunInterrupted) -> RunInterrupted:
    """``outcome`` once the record held back is written; or what refused the record
    (the claim lost, the step recorded by another pass). A database that cannot be
    reached ends the pass as ever: the run is still claimed, the pass runs again."""
    try:
        flush(state)
    except StoreUnavailable:
        raise
    except RunInterrupted as exc:
        return exc
    return outcome


def replay(
    state: RunState, defn: registry.WorkflowDef, args: Any
) -> tuple[Any, BaseException | None]:
    """Run the body once over ``state``: its value, or what it raised (None, the outcome).
    A control-flow outcome raised inside the body wins even if the body caught it."""
    outcome: BaseException | None = None
    value: Any = None
    token = current_frame.set(Frame(state, Scope()))
    try:
        value = defn.fn(*serde.decode(args))
    except (Exception, RunInterrupted) as exc:
        outcome = exc
    finally:
        current_frame.reset(token)
    return value, state.aborted or outcome


def _settle(
    claim: Claim, workflow: str, began: float, exc: BaseException, state: RunState | None = None
) -> PassResult:
    if isinstance(exc, StoreUnavailable):
        raise exc
    if isinstance(exc, Suspended):
        if suspend_run(claim, exc.due, exc.events, exc.runs):
            signals.run_suspended.emit(
                sender=RunState,
                run_id=claim.run_id,
                workflow=workflow,
                runner=claim.runner,
                due=exc.due,
                events=exc.events,
                runs=exc.runs,
            )
            return PassResult("waiting", exc)
        return _abandon(claim, workflow, "claim lost before the run could wait")
    if isinstance(exc, DrainRequested | AlreadyRecorded):
        # A drain; or records this pass did not know of: if the claim still holds, a
        # fresh pass must replay them (leaving the run held would strand it).
        if requeue_run(claim):
            report_requeued(claim.run_id, workflow, claim.runner, str(exc))
            return PassResult("requeued", exc)
        return _abandon(claim, workflow, f"claim lost ({exc})")
    if isinstance(exc, RunInterrupted):
        reason = str(exc) or type(exc).__name__
        return _abandon(claim, workflow, reason, exc)
    if isinstance(exc, Terminal):
        return _finish(claim, workflow, began, Status.STOPPED, exc=exc, state=state)
    if isinstance(exc, EffectUncertain):
        return _finish(claim, workflow, began, Status.BLOCKED, exc=exc, state=state)
    return _finish(claim, workflow, began, Status.FAILED, exc=exc, state=state)


def encode_outcome_error(exc: BaseException) -> dict[str, Any]:
    """The stored ``error`` of a run (with its traceback, see ``stored_errors.encode_error``); a
    stop keeps its reason and payload readable; ``step_id`` says where a blocked run, or
    a run stopped inside a step, stopped."""
    error = stored_errors.encode_error(exc)
    if isinstance(exc, Terminal):
        # The reason is shown, never rebuilt: printable on every database (a NUL in it
        # would make PostgreSQL refuse the whole outcome).
        error["reason"] = (
            safe_text.printable(exc.reason) if isinstance(exc.reason, str) else exc.reason
        )
        error["payload"] = error["args"][1]
    # Where the run stopped: the uncertain step, or the step that raised Terminal.
    step_id = exc.step_id if isinstance(exc, EffectUncertain) else failure_detail.stop_step(exc)
    if step_id is not None:
        error["step_id"] = step_id
    return error


def _finish(
    claim: Claim,
    workflow: str,
    began: float,
    status: str,
    *,
    result: Any = None,
    exc: BaseException | None = None,
    state: RunState | None = None,
) -> PassResult:
    """Write the run's outcome, with the pass's record held back if there is one
    (``recorded.record``): both, or neither."""
    error = encode_outcome_error(exc) if exc is not None else None
    held = None if state is None else take_held(state)
    try:
        written = finish_run(
            claim, status, result=result, error=error, step=None if held is None else held.values
        )
    except AlreadyRecorded as clash:  # another pass recorded the step: replay it
        return _settle(claim, workflow, began, clash)
    if not written:
        return _abandon(claim, workflow, f"claim lost before recording {status}")
    if held is not None:
        assert state is not None
        announce(state, held.step, held.duration)
    signals.run_finished.emit(
        sender=RunState,
        run_id=claim.run_id,
        workflow=workflow,
        runner=claim.runner,
        status=status,
        duration=time.monotonic() - began,
        error=error,
        exc=exc,
    )
    return PassResult(status, exc)


def fail(claim: Claim, workflow: str, exc: BaseException) -> PassResult:
    """Fail ``claim``'s run with ``exc`` the way every outcome is given: written fenced
    by the claim, then logged, counted and reported by the ``run_finished`` receivers.
    For a pass that crashed outside the engine's own handling."""
    return _finish(claim, workflow, time.monotonic(), Status.FAILED, exc=exc)


def report_requeued(run_id: Any, workflow: str, runner: str, reason: str, **extra: Any) -> None:
    """Announce a run put back to ``scheduled`` (drain, orphan recovery), so logs and
    metrics see every requeue the same way. ``extra``: e.g. ``dead_runner``."""
    signals.run_requeued.emit(
        sender=RunState, run_id=run_id, workflow=workflow, runner=runner, reason=reason, **extra
    )


def _abandon(
    claim: Claim, workflow: str, reason: str, exc: BaseException | None = None
) -> PassResult:
    signals.run_abandoned.emit(
        sender=RunState, run_id=claim.run_id, workflow=workflow, runner=claim.runner, reason=reason
    )
    return PassResult("abandoned", exc or ClaimLost(reason))
