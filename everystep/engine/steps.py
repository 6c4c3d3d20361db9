"""One step call inside a run: pick its id, decide from the record, execute if new."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from everystep import serde, signals, store, tracing
from everystep.engine import replay
from everystep.engine.state import Frame, RunState, current_frame
from everystep.errors import (
    DrainRequested,
    EffectUncertain,
    EverystepError,
    RunInterrupted,
    SimulatedCrash,
    Terminal,
    WorkflowCodeError,
)
from everystep.registry import StepDef
from everystep.values import RecordedStep

# Crash points installed by ``everystep.testing`` (``crash_at``, ``crash_after``): each
# is asked ``point(where, step_id, name)`` whether the process "dies" there. ``where``:
# "before_body" (an unsafe step's started row is committed), "after_body" (the body
# returned or raised, its outcome is not recorded), "after_record", and "before_finish"
# (the body is done, the run's outcome is not written; step id "", the workflow's name).
CrashPoint = Callable[[str, str, str], bool]
_crash_points: list[CrashPoint] = []
_crash_lock = threading.Lock()


def add_crash_point(point: CrashPoint) -> None:
    with _crash_lock:
        _crash_points.append(point)


def remove_crash_point(point: CrashPoint) -> None:
    with _crash_lock:
        _crash_points.remove(point)


def simulated_crash(where: str, step_id: str, name: str) -> SimulatedCrash | None:
    """The crash an installed crash point asks for at ``where``, or None (always, and
    at the cost of one list check, when no test installed any)."""
    if not _crash_points:  # the usual case, read without the lock: tests add points
        return None
    with _crash_lock:
        points = list(_crash_points)
    if any(point(where, step_id, name) for point in points):
        what = f"step {step_id} ({name})" if step_id else f"run of {name}"
        return SimulatedCrash(f"simulated crash at {where} of {what}")
    return None


def _maybe_crash(step_id: str, name: str, where: str = "after_body") -> None:
    crash = simulated_crash(where, step_id, name)
    if crash is not None:
        raise crash


def call_step(
    defn: StepDef, args: tuple[Any, ...], kwargs: dict[str, Any], everystep_id: str | None
) -> Any:
    """Run a ``@step`` call: a plain call outside a run or inside another step's body,
    otherwise served from the record or executed and recorded."""
    frame = current_frame.get()
    if frame is None or frame.in_step:
        return defn.fn(*args, **kwargs)
    run = frame.run
    if run.aborted is not None:
        raise run.aborted
    step_id = frame.scope.next_id(everystep_id)
    recorded = run.recorded(step_id)
    decision = replay.decide(recorded, defn.name)
    if decision is replay.Decision.EXECUTE:
        return _execute(frame, defn, step_id, args, kwargs)
    assert recorded is not None
    if decision is replay.Decision.SERVE_RESULT:
        return serde.decode(recorded.result)
    if decision is replay.Decision.RAISE_ERROR:
        assert recorded.error is not None
        exc = serde.decode_error(recorded.error)
        if isinstance(exc, Terminal):
            raise run.abort(exc)
        raise exc
    if decision is replay.Decision.CODE_CHANGED:
        raise run.abort(
            WorkflowCodeError(
                f"run {run.run_id}: step {step_id} was recorded as {recorded.name} but the "
                f"workflow now calls {defn.name} there; the code changed incompatibly"
            )
        )
    raise run.abort(
        EffectUncertain(
            f"run {run.run_id}: unsafe step {step_id} ({defn.name}) started but its outcome was "
            "never recorded; settle it with everystep_resolve_step",
            step_id,
        )
    )


def _execute(
    frame: Frame, defn: StepDef, step_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    run = frame.run
    # The drain boundary: a step that is not recorded yet is not started while draining.
    if run.should_drain():
        raise DrainRequested(f"drain requested before step {step_id}")
    stored_args = serde.encode(list(args), f"arguments of step {step_id}")
    stored_kwargs = serde.encode(kwargs, f"keyword arguments of step {step_id}")
    started_at = timezone.now()
    record = {
        "step_id": step_id,
        "name": defn.name,
        "args": stored_args,
        "kwargs": stored_kwargs,
        "started_at": started_at,
    }
    if defn.unsafe_to_repeat:
        # Committed before the body runs: a crash inside it leaves evidence on replay.
        store.record_step(run.claim, status="started", **record)
    if _crash_points:
        _maybe_crash(step_id, defn.name, "before_body")
    began = time.monotonic()
    token = current_frame.set(Frame(run, frame.scope, step_id))
    try:
        with tracing.span("everystep.step", run_id=run.run_id, step_id=step_id, step=defn.name):
            value = defn.fn(*args, **kwargs)
    except BaseException as exc:
        current_frame.reset(token)
        if _passes_through(exc):
            raise
        _maybe_crash(step_id, defn.name)
        error = serde.encode_error(exc)
        _record(run, record, "failed", began, error=error, after=defn.unsafe_to_repeat)
        if isinstance(exc, Terminal):
            raise run.abort(exc) from None
        # The body must see what a replay will re-raise: if the exception cannot be
        # rebuilt as its own type, the live pass gets the StepFailure a replay would get
        # (with the original chained), so an `except` in the body behaves the same.
        replayed = serde.decode_error(error)
        if type(replayed) is not type(exc):
            raise replayed from exc
        raise
    current_frame.reset(token)
    _maybe_crash(step_id, defn.name)
    try:
        result = serde.encode(value, f"result of step {step_id} ({defn.name})")
    except EverystepError as exc:
        _record(
            run, record, "failed", began, error=serde.encode_error(exc), after=defn.unsafe_to_repeat
        )
        raise
    _record(run, record, "done", began, result=result, after=defn.unsafe_to_repeat)
    return serde.decode(result)


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


def recorded(run: RunState, step: RecordedStep, began: float) -> None:
    """What follows every record of this pass (a step's, a wait's): later calls in the
    pass see it, and the ``step_recorded`` receivers (logs, metrics) hear of it."""
    run.remember(step)
    signals.step_recorded.send(
        sender=RunState,
        run_id=run.run_id,
        workflow=run.workflow_name,
        runner=run.claim.runner,
        step_id=step.step_id,
        step=step.name,
        status=step.status,
        duration=time.monotonic() - began,
    )


def _record(
    run: RunState,
    record: dict[str, Any],
    status: str,
    began: float,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    after: bool,
) -> None:
    store.record_step(
        run.claim, status=status, result=result, error=error, after_started=after, **record
    )
    recorded(run, RecordedStep(record["step_id"], record["name"], status, result, error), began)
    if _crash_points:
        _maybe_crash(record["step_id"], record["name"], "after_record")
