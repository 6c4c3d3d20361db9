"""How a pass over a claimed run ends: what the body's replay gave
(``everystep.engine.execute``) becomes exactly one of these, written fenced by the claim
(``everystep.store.outcome``) and then announced (``everystep.signals``):

- ``completed`` / ``failed`` / ``stopped`` / ``blocked``: the outcome is written (``finish``);
- ``requeued``: the worker is draining, or another pass recorded a step this one did not
  know of; the run goes back to ``scheduled``;
- ``waiting``: the body sleeps or waits for an event or runs; the run is ``scheduled``
  again, due when the wait ends (or when the event is sent, or the runs end);
- ``abandoned``: nothing more may be written (claim lost, row deleted, simulated
  crash); whoever holds the run now decides its fate;
- ``retry``: the database could not be reached; the run is still claimed and the
  pass must be run again once the database is back.

The calls go one way: ``end_pass`` → ``finish`` / suspend / requeue → ``abandon``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from everystep import (
    code_version,
    failure_detail,
    registry,
    safe_text,
    serde,
    signals,
    stored_errors,
)
from everystep.engine.core.pass_state import RunState
from everystep.engine.core.recorded import announce, flush, take_held
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
    WorkflowCodeError,
)
from everystep.models import FINAL_STATUSES, Status
from everystep.shapes import Shape, encode
from everystep.store.outcome import finish_run, requeue_run, suspend_run
from everystep.values import Claim, Ended


@dataclass(frozen=True)
class PassResult:
    """How one pass over a run ended."""

    status: str  # a run status, or "requeued" / "abandoned" / "retry"
    exc: BaseException | None = None
    # An outcome written: its stored result and the time written with it.
    result: Any = None
    at: Any = None


def end_pass(
    state: RunState,
    began: float,
    value: Any,
    outcome: BaseException | None,
    returns: Shape | None = None,
) -> PassResult:
    """End the pass over ``state`` whose body returned ``value`` (``outcome`` None) or
    raised ``outcome``; ``returns``: the shape of its result (the body's return
    annotation). A database that cannot be reached is raised: the run is still
    claimed, and the pass runs again."""
    claim, workflow = state.claim, state.workflow_name
    if outcome is None:
        try:
            where = f"result of workflow {workflow}"
            result = (
                serde.encode(value, where) if returns is None else encode(value, where, returns)
            )
        except EverystepError as exc:
            outcome = exc
        else:
            return finish(claim, workflow, began, Status.COMPLETED, result=result, state=state)
    if isinstance(outcome, Suspended | DrainRequested | AlreadyRecorded):
        outcome = _flushed(state, outcome)
    if isinstance(outcome, StoreUnavailable):
        raise outcome
    if isinstance(outcome, Suspended):
        return _suspend(claim, workflow, outcome)
    if isinstance(outcome, DrainRequested | AlreadyRecorded):
        return _requeue(claim, workflow, outcome)
    if isinstance(outcome, RunInterrupted):
        return abandon(claim, workflow, str(outcome) or type(outcome).__name__, outcome)
    if isinstance(outcome, WorkflowCodeError) and recorded_by_other_code(state, outcome):
        return hand_back(claim, workflow, outcome, left_by=code_version.current())
    if isinstance(outcome, Terminal):
        status = Status.STOPPED
    elif isinstance(outcome, EffectUncertain):
        status = Status.BLOCKED
    else:
        status = Status.FAILED
    return finish(claim, workflow, began, status, exc=outcome, state=state)


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


def recorded_by_other_code(state: RunState, exc: WorkflowCodeError) -> bool:
    """Whether the record this replay could not follow was written by another version
    of the code (a newer one, in a deploy): then the run is not this worker's to fail.
    One written by this very version, or by code that did not say, is a real change
    of the workflow's code: the run fails as ever."""
    recorded = state.records.get(exc.step_id) if exc.step_id is not None else None
    written_by = None if recorded is None else recorded.code_version
    return written_by is not None and written_by != code_version.current()


def hand_back(claim: Claim, workflow: str, exc: Exception, *, left_by: str | None) -> PassResult:
    """Put the run back, unchanged, for a worker that has its code: ``left_by`` (this
    worker's code version) keeps every worker on that version from claiming it again."""
    if not requeue_run(claim, handed_back_by=left_by):
        return abandon(claim, workflow, f"claim lost ({exc})")
    reason = f"handed back unchanged for a worker on other code: {exc}"
    report_requeued(claim.run_id, workflow, claim.runner, reason)
    return PassResult("requeued", exc)


def _suspend(claim: Claim, workflow: str, wait: Suspended) -> PassResult:
    if not suspend_run(claim, wait.due, wait.events, wait.runs):
        return abandon(claim, workflow, "claim lost before the run could wait")
    signals.run_suspended.emit(
        sender=RunState,
        run_id=claim.run_id,
        workflow=workflow,
        runner=claim.runner,
        due=wait.due,
        events=wait.events,
        runs=wait.runs,
    )
    return PassResult("waiting", wait)


def _requeue(claim: Claim, workflow: str, exc: RunInterrupted) -> PassResult:
    # A drain; or records this pass did not know of: if the claim still holds, a
    # fresh pass must replay them (leaving the run held would strand it).
    if not requeue_run(claim):
        return abandon(claim, workflow, f"claim lost ({exc})")
    report_requeued(claim.run_id, workflow, claim.runner, str(exc))
    return PassResult("requeued", exc)


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


def finish(
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
    now = timezone.now()
    try:
        written = finish_run(
            claim,
            status,
            result=result,
            error=error,
            step=None if held is None else held.values,
            now=now,
        )
    except AlreadyRecorded as clash:  # another pass recorded the step: replay it
        return _requeue(claim, workflow, clash)
    if not written:
        return abandon(claim, workflow, f"claim lost before recording {status}")
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
    return PassResult(status, exc, result, now)


def fail(claim: Claim, workflow: str, exc: BaseException) -> PassResult:
    """Fail ``claim``'s run with ``exc`` the way every outcome is given: written fenced
    by the claim, then logged, counted and reported by the ``run_finished`` receivers.
    For a pass that crashed outside the engine's own handling (``SystemExit`` from a
    body, an engine bug): a task's run still sends Django's ``task_finished``, as every
    pass that ends it does."""
    ended = finish(claim, workflow, time.monotonic(), Status.FAILED, exc=exc)
    if ended.status in FINAL_STATUSES:
        try:
            defn = registry.definition(workflow)
        except Exception:  # what crashed the pass may be finding the definition itself
            defn = None
        if defn is not None and defn.finished is not None:
            defn.finished(claim, workflow, Ended(ended.status, exc=exc))
    return ended


def report_requeued(run_id: Any, workflow: str, runner: str, reason: str, **extra: Any) -> None:
    """Announce a run put back to ``scheduled`` (drain, orphan recovery), so logs and
    metrics see every requeue the same way. ``extra``: e.g. ``dead_runner``."""
    signals.run_requeued.emit(
        sender=RunState, run_id=run_id, workflow=workflow, runner=runner, reason=reason, **extra
    )


def abandon(
    claim: Claim, workflow: str, reason: str, exc: BaseException | None = None
) -> PassResult:
    """End the pass writing nothing: the claim no longer holds the run (or a simulated
    crash stopped it); whoever holds it now decides its fate."""
    signals.run_abandoned.emit(
        sender=RunState, run_id=claim.run_id, workflow=workflow, runner=claim.runner, reason=reason
    )
    return PassResult("abandoned", exc or ClaimLost(reason))
