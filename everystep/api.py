"""The public API, in one place a user reads: ``@workflow``, ``@step``, ``parallel``,
``schedule``, the durable waits (``sleep``, ``sleep_until``, ``wait_for``), ``send``,
versioning (``patched``, ``deprecate_patch``), composition (``start``, ``result``,
``gather``) and recovery (``fork``).

The decorators live in ``everystep.decorators`` and starting runs in
``everystep.scheduling``; they are imported here so ``everystep.api.<name>`` names every
public function. The rest are thin wrappers over the engine and the store.

Nothing here touches the database at import time, so workflow modules can be imported
before Django is fully set up.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload
from uuid import UUID

# Re-exported (``import x as x``): ``everystep.__all__`` is the one list of public names.
from everystep.async_api import acancel as acancel
from everystep.async_api import agather as agather
from everystep.async_api import aresult as aresult
from everystep.async_api import aschedule as aschedule
from everystep.async_api import asend as asend
from everystep.async_api import asleep as asleep
from everystep.async_api import asleep_until as asleep_until
from everystep.async_api import astart as astart
from everystep.async_api import await_for as await_for
from everystep.async_api import awatch as awatch
from everystep.cancelling import cancel as cancel
from everystep.decorators import step as step
from everystep.decorators import workflow as workflow
from everystep.scheduling import schedule as schedule
from everystep.scheduling import start as start

if TYPE_CHECKING:
    from everystep.engine.operations.parallel import Branch
    from everystep.models import Workflow
    from everystep.scheduling import TaskRun

T = TypeVar("T")  # a payload's type (``wait_for(..., type=T)``)
R = TypeVar("R")  # what a run returns (``result(run)``)


def parallel(*branches: Branch, everystep_id: str | None = None) -> tuple[Any, ...]:
    """Run branches concurrently and return their results in branch order.

    A branch is a zero-argument callable, or a list/tuple of them run in order (its
    result is a tuple). Branches may nest ``parallel()``.
    """
    from everystep.engine.operations.parallel import parallel as run_parallel

    return run_parallel(*branches, everystep_id=everystep_id)


@overload
def result(run: Workflow[R], timeout: timedelta | float | None = None) -> R: ...
@overload
def result(run: TaskRun[R], timeout: timedelta | float | None = None) -> R: ...
@overload
def result(run: UUID | str, timeout: timedelta | float | None = None) -> Any: ...


# ``run: Any``: the overloads above say what it takes (a run id's result is ``Any``).
def result(run: Any, timeout: timedelta | float | None = None) -> Any:
    """Wait until ``run`` (a ``Workflow`` or a run id) has ended and return its result.
    A failed run's exception is raised (rebuilt as on replay), a stopped run raises
    ``RunStopped``, a cancelled one ``RunCancelled``; a blocked run is waited through;
    past ``timeout`` (seconds or ``timedelta``): ``WaitTimeout``. Inside a body the wait
    is durable (recorded, no worker slot held meanwhile); outside, it blocks."""
    from everystep.waiting import blocking

    return blocking.result(run, timeout)


@overload
def gather(runs: Sequence[Workflow[R]], timeout: timedelta | float | None = None) -> list[R]: ...
@overload
def gather(runs: Sequence[TaskRun[R]], timeout: timedelta | float | None = None) -> list[R]: ...
@overload
def gather(runs: Sequence[UUID | str], timeout: timedelta | float | None = None) -> list[Any]: ...
@overload
def gather(
    runs: Sequence[Workflow | TaskRun[Any] | UUID | str], timeout: timedelta | float | None = None
) -> list[object]: ...


def gather(runs: Sequence[Any], timeout: timedelta | float | None = None) -> list[Any]:
    """The results of ``runs``, in order, once the last has ended: inside a body one
    durable wait, resumed once. Failures as ``parallel()`` raises them: one is raised,
    several become an ``ExceptionGroup``."""
    from everystep.waiting import blocking

    return blocking.gather(runs, timeout)


@overload
def fork(
    run: Workflow[R], from_step: str | None = None, args: Sequence[Any] | None = None
) -> Workflow[R]: ...
@overload
def fork(
    run: UUID | str, from_step: str | None = None, args: Sequence[Any] | None = None
) -> Workflow: ...


def fork(
    run: Workflow | UUID | str,
    from_step: str | None = None,
    args: Sequence[Any] | None = None,
) -> Workflow:
    """A new ``scheduled`` run of ``run``'s workflow that starts with copies of its
    records made before ``from_step`` (default: the first step that failed or has no
    outcome), so a worker replays those and executes from there under the code installed
    now; ``args`` replace the arguments. Only a finished run can be forked; the original
    is left as it was. Refused with ``EverystepError`` (nothing written) when the fork
    would fail on replay. See docs/recovering.md."""
    from everystep.replays.fork import fork_run

    return fork_run(run, from_step=from_step, args=args)


def sleep(delay: timedelta | float) -> None:
    """Inside a workflow body: wait ``delay`` (a ``timedelta`` or seconds), durably. The
    run holds no worker slot meanwhile, and a crash neither loses the wait nor restarts
    its clock."""
    from everystep.engine.operations import waits

    waits.sleep(delay)


def sleep_until(when: datetime) -> None:
    """Inside a workflow body: wait until ``when`` (naive: the project's time zone),
    durably; returns at once if that time has passed."""
    from everystep.engine.operations import waits

    waits.sleep_until(when)


@overload
def wait_for(name: str, timeout: timedelta | float | None = None) -> Any: ...
@overload
def wait_for(name: str, timeout: timedelta | float | None = None, *, type: type[T]) -> T: ...
@overload
def wait_for(name: str, timeout: timedelta | float | None = None, *, type: Any) -> Any: ...


def wait_for(name: str, timeout: timedelta | float | None = None, *, type: Any = None) -> Any:
    """Inside a workflow body: wait durably for the event ``name`` sent to this run, and
    return its payload; raise ``everystep.errors.WaitTimeout`` after ``timeout``. An event
    sent before the run reaches this wait is kept and returned at once. ``type`` (a
    class or an annotation such as ``list[Order]``) rebuilds the payload as that type
    (docs/typed-values.md); without it a dataclass or model sent arrives as its dict."""
    from everystep.engine.operations import waits

    return waits.wait_for(name, timeout, type)


def send(run_id: UUID | str, name: str, payload: Any = None) -> bool:
    """Send the event ``name`` (with ``payload``) to a run, in the current transaction,
    and make it due at once if it waits. Returns False if an event of that name was
    already sent to the run (the first payload wins). Raises ``EverystepError`` for an
    unknown or finished run."""
    from everystep.store.events import send_event
    from everystep.sync_callers import refuse_on_event_loop

    refuse_on_event_loop("send()", "await asend()")
    return send_event(run_id, name, payload)


def patched(change_id: str) -> bool:
    """Inside a workflow body: True unless this run's recorded history shows it got past
    this point under the code before ``change_id`` (then False, so it keeps replaying the
    old branch). Recorded, so a run takes the same branch on every replay. Write a
    change to a body's steps as ``if patched("id"): <new> else: <old>``."""
    from everystep.engine.operations import patches

    return patches.patched(change_id)


def deprecate_patch(change_id: str) -> None:
    """Replaces ``patched(change_id)`` once the old branch is deleted: a run that took the
    old branch fails with ``WorkflowCodeError`` instead of replaying code it never ran.
    ``everystep_check_replay`` tells when no unfinished run takes it any more."""
    from everystep.engine.operations import patches

    patches.deprecate_patch(change_id)


def publish(key: str, value: Any) -> None:
    """From a workflow body or inside a step: make ``value`` the latest under ``key`` for
    the current run, for ``published``/``watch`` readers (``docs/progress.md``). From a
    step it is visible when this returns; from a body a replay publishes nothing."""
    from everystep.engine.operations.progress import publish as publish_value

    publish_value(key, value)


def published(
    run: Workflow | UUID | str, *, types: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The latest value of every key run ``run`` published; ``types`` maps a key to the
    type its value is rebuilt as (a dataclass, a pydantic model, ``list[Order]``…;
    without it, such a value reads as its JSON form)."""
    from everystep.waiting.watching import published as read
    from everystep.waiting.watching import typed

    return typed(read(run), types)


def watch(
    run: Workflow | UUID | str,
    timeout: timedelta | float | None = None,
    *,
    types: Mapping[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield run ``run``'s published values at once and on each change, ending after the
    run is final with its final values; past ``timeout`` a ``WaitTimeout``. ``types``
    as for ``published()``."""
    from everystep.waiting.watching import typed
    from everystep.waiting.watching import watch as follow

    return (typed(values, types) for values in follow(run, timeout))
