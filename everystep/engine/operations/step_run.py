"""Executing one step that has no record, and serving one that has: the drain boundary,
an unsafe step's ``started`` record, the body (in its transaction for an atomic step) and
its outcome recorded. Shared by a sync body's calls (``everystep.engine.steps``) and an
async body's (``everystep.engine.asynchronous.async_steps``), which run the same functions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

from django.db import connections
from django.utils import timezone

from everystep import conf, failure_detail, serde, shapes, stored_errors, tracing
from everystep.engine.core.crashes import maybe_crash
from everystep.engine.core.pass_state import Frame, RunState, current_frame
from everystep.engine.core.recorded import Operation, flush, record, served, writing
from everystep.engine.core.replay import Decision
from everystep.errors import (
    DrainRequested,
    EffectUncertain,
    EverystepError,
    RunInterrupted,
    Terminal,
)
from everystep.models import StepStatus
from everystep.registry import StepDef
from everystep.store import database
from everystep.store.step_records import fenced_transaction


def served_step(op: Operation, defn: StepDef) -> Any:
    """A recorded step's outcome: its result, or its failure raised; an unsafe step whose
    outcome was never recorded blocks the run."""
    if op.decision is Decision.UNCERTAIN:
        raise op.run.abort(
            EffectUncertain(
                f"run {op.run.run_id}: unsafe step {op.step_id} ({defn.name}) started but its "
                "outcome was never recorded; settle it with everystep_resolve_step",
                op.step_id,
            )
        )
    return served(op, defn.returns)


def execute_step(
    frame: Frame, defn: StepDef, step_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Execute a step that has no record and record its outcome: its value, or its
    failure raised."""
    values = begin_step(frame, defn, step_id, args, kwargs)
    # An atomic step's body and its record share one transaction, fenced by the claim:
    # its database writes commit with the record or not at all. The transaction is left
    # before the step's exception is raised, so a recorded failure commits too.
    with fenced_transaction(frame.run.claim) if defn.atomic else nullcontext():
        raised, value = _run_and_record(frame, defn, values, args, kwargs)
    if raised is not None:
        raise raised
    return value


def begin_step(
    frame: Frame, defn: StepDef, step_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """What comes before a new step's body: the drain boundary, and for an unsafe step
    its ``started`` record. The step's record columns so far."""
    run = frame.run
    writing(run, step_id)
    flush(run)  # no step starts while an earlier outcome is held back unwritten
    # The drain boundary: a step that is not recorded yet is not started while draining.
    if run.should_drain():
        raise DrainRequested(f"drain requested before step {step_id}")
    values = {
        "step_id": step_id,
        "name": defn.name,
        # Kept for show and compared on replay, never rebuilt: typed values are stored
        # whatever the parameters' annotations say.
        "args": serde.encode(list(args), f"arguments of step {step_id}", serde.EVERYTHING),
        "kwargs": serde.encode(kwargs, f"keyword arguments of step {step_id}", serde.EVERYTHING),
        "started_at": timezone.now(),
    }
    if defn.unsafe_to_repeat:
        # Committed before the body runs: a crash inside it leaves evidence on replay.
        record(run, status=StepStatus.STARTED, crash_point=None, **values)
    maybe_crash(step_id, defn.name, "before_body")
    return values


def _run_and_record(
    frame: Frame,
    defn: StepDef,
    values: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[BaseException | None, Any]:
    """Run the body and record its outcome: (None, the value the body returns) or (the
    exception the body raises, None). Control flow (a drain, a lost claim, a simulated
    crash) is raised through, so an atomic step's transaction rolls back."""
    run = frame.run
    began = time.monotonic()
    token = current_frame.set(Frame(run, frame.scope, values["step_id"]))
    try:
        with (
            step_span(run, values["step_id"], defn.name),
            atomic_body(run, values["step_id"], defn.name) if defn.atomic else nullcontext(),
        ):
            value = defn.fn(*args, **kwargs)
    except BaseException as exc:
        current_frame.reset(token)
        return failed_outcome(run, defn, values, began, exc)
    current_frame.reset(token)
    return value_outcome(run, defn, values, began, value)


def failed_outcome(
    run: RunState, defn: StepDef, values: dict[str, Any], began: float, exc: BaseException
) -> tuple[BaseException, None]:
    """Record that the step's body raised ``exc``: what the body calling it sees raised.
    Control flow is raised through unrecorded."""
    step_id = values["step_id"]
    if _passes_through(exc) or (defn.atomic and exc is run.aborted):
        raise exc
    maybe_crash(step_id, defn.name)
    error = stored_errors.encode_error(exc)
    _record(run, values, "failed", began, error=error, after=defn.unsafe_to_repeat)
    # From here on the failure's traceback is the recorded one, as on a replay: the
    # run's outcome is then the same whether this pass or a later one gives it.
    failure_detail.recorded(exc, error.get("traceback"))
    if isinstance(exc, Terminal):
        failure_detail.stopped_in(exc, step_id)  # the run's outcome says where
        aborted = run.abort(exc)
        aborted.__suppress_context__ = True
        return aborted, None
    # The body must see what a replay will re-raise: if the exception cannot be
    # rebuilt as its own type, the live pass gets the StepFailure a replay would get
    # (with the original chained), so an `except` in the body behaves the same.
    replayed = stored_errors.decode_error(error)
    if type(replayed) is not type(exc):
        replayed.__cause__ = exc
        return replayed, None
    return exc, None


def value_outcome(
    run: RunState, defn: StepDef, values: dict[str, Any], began: float, value: Any
) -> tuple[EverystepError | None, Any]:
    """Record that the step's body returned ``value``: (None, the value as a replay
    serves it), or (the error, None) if it cannot be stored."""
    step_id = values["step_id"]
    maybe_crash(step_id, defn.name)
    where = f"result of step {step_id} ({defn.name})"
    returns = defn.returns
    try:
        if returns is None:
            result = serde.encode(value, where)
            live = serde.decode(result)
        else:
            result = shapes.encode(value, where, returns)
            # What a replay will serve: rebuilt from the stored form, before it is
            # recorded (a type that cannot rebuild its own stored form fails the step
            # here, not on every replay after).
            live = returns.rebuild(result, where)
    except EverystepError as exc:
        error = stored_errors.encode_error(exc)
        _record(run, values, "failed", began, error=error, after=defn.unsafe_to_repeat)
        return exc, None
    _record(run, values, "done", began, result=result, after=defn.unsafe_to_repeat)
    return None, live


def step_span(run: RunState, step_id: str, name: str) -> Any:
    """The span of a step's body, if this pass is traced."""
    if not run.traced:
        return nullcontext()
    return tracing.span("everystep.step", run_id=run.run_id, step_id=step_id, step=name)


@contextmanager
def atomic_body(run: RunState, step_id: str, name: str) -> Iterator[None]:
    """Around an atomic step's body: a savepoint, so a body that raises leaves none of
    its writes behind while its failure is recorded; and a guard on every other database
    alias, whose writes the step's transaction could not cover."""

    def refuse(*_: Any) -> None:
        # Made the run's outcome: the body may catch this error, it cannot go on.
        raise run.abort(
            EverystepError(
                f"run {run.run_id}: atomic step {step_id} ({name}) used another database "
                "than the one everystep records in: its writes there could not commit with "
                "the step's record. Make it a plain @step, or keep it to one database"
            )
        )

    ours = conf.database()
    with ExitStack() as guards:
        for alias in connections:
            if alias != ours:
                guards.enter_context(connections[alias].execute_wrapper(refuse))
        with database.atomic():
            yield
            if run.aborted is not None:  # the body swallowed its refusal: roll back
                raise run.aborted


def _passes_through(exc: BaseException) -> bool:
    """Whether a step body's exception unwinds the pass instead of being recorded as the
    step's failure. Every other one, SystemExit and custom BaseExceptions included, is
    recorded: the run fails with a StepFailure naming its type, the worker carries on."""
    if isinstance(exc, RunInterrupted | GeneratorExit):  # control flow, not an outcome
        return True
    # Ctrl-C is delivered to the main thread only: there (``run_due()`` in a test
    # session) it interrupts the process and must not become the step's outcome. A
    # worker runs steps on pool threads, where only the step's own code raises it.
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is (
        threading.main_thread()
    )


def _record(
    run: RunState,
    values: dict[str, Any],
    status: str,
    began: float,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    after: bool,
) -> None:
    record(
        run, status=status, result=result, error=error, began=began, after_started=after, **values
    )
