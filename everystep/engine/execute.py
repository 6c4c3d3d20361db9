"""One pass over a claimed run: replay the body, executing what is new, until it
returns or stops; how the pass then ends (finish, wait, requeue, abandon) is
``everystep.engine.outcome``'s. Each operation the body reaches takes the path of
``everystep.engine.recorded``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from everystep import conf, registry, serde, signals, tracing
from everystep.engine import task_runs
from everystep.engine.crashes import simulated_crash
from everystep.engine.outcome import PassResult, abandon, end_pass, finish
from everystep.engine.pass_state import Frame, RunState, Scope, current_frame
from everystep.errors import EverystepError, RunInterrupted, StoreUnavailable, TooManyRecoveries
from everystep.models import FINAL_STATUSES, Status
from everystep.store import database
from everystep.store.outcome import merges_records
from everystep.store.runs import get_run, load_steps
from everystep.values import Claim


def run_pass(claim: Claim, *, should_drain: Callable[[], bool] = lambda: False) -> PassResult:
    """Replay and advance one claimed run until it reaches an outcome or must stop
    (``everystep.engine.outcome`` lists the ways a pass ends).

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
            return abandon(claim, "?", "the run row no longer exists")
        claim = replace(
            claim, workflow=row.name, args=row.args, fresh=False, recoveries=row.recoveries
        )
    name = claim.workflow
    assert name is not None
    defn = task_runs.definition(name)
    refusal = _refusal(claim, name, defn)
    if refusal is not None:
        return finish(claim, name, time.monotonic(), Status.FAILED, exc=refusal)
    assert defn is not None
    state = _new_state(claim, name, should_drain)
    if defn.task is not None:
        try:
            state.task_result = task_runs.begin(claim)
        except EverystepError as exc:  # a row a task's run cannot have (its arguments)
            return finish(claim, name, time.monotonic(), Status.FAILED, exc=exc)
        if state.task_result is None:
            return abandon(claim, name, "the claim no longer holds the run")
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
    ended = end_pass(state, began, value, outcome)
    if defn.task is not None and ended.status in FINAL_STATUSES:
        task_runs.finished(claim, name)
    return ended


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
            "this process (renamed or moved code, or a worker running the wrong project), "
            f"and it is {_not_a_task(name)}"
        )
    return None


def _not_a_task(name: str) -> str:
    try:
        task_runs.task_named(name)
    except EverystepError as exc:
        return str(exc)
    return "a task"  # it resolved since: a definition the next pass finds


def _new_state(claim: Claim, name: str, should_drain: Callable[[], bool]) -> RunState:
    conn = database.connection()
    return RunState(
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
