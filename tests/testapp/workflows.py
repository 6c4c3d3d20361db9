"""Workflows the test suite runs. ``CALLS`` counts step body executions per step."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from everystep import Terminal, parallel, step, workflow
from everystep.context import current
from everystep.errors import StepFailure

# Other modules of workflows: autodiscovery reaches them only from here.
from tests.testapp import bad_workflows, wait_workflows  # noqa: F401

CALLS: Counter[str] = Counter()
_lock = threading.Lock()
# Flipped by the code-change test to make ``evolving`` call a different step.
EVOLVED = {"on": False}


def _count(name: str) -> None:
    with _lock:
        CALLS[name] += 1


@step
def add(a: int, b: int) -> int:
    _count("add")
    return a + b


@step
def double(x: int) -> int:
    _count("double")
    return x * 2


@step
def pair(x: Any) -> tuple[Any, Any]:
    _count("pair")
    return (x, x)


@step
def echo(value: Any) -> Any:
    _count(f"echo:{value}")
    return value


@step
def peek(step_id: str) -> Any:
    """Reads an earlier step's outcome from inside a step."""
    _count("peek")
    ctx = current()
    assert ctx is not None
    return ctx.outcomes[step_id]["result"]


@step
def explode(message: str) -> None:
    _count("explode")
    raise ValueError(message)


@step
def cleanup(note: str) -> str:
    _count("cleanup")
    return f"cleaned: {note}"


@step
def halt(reason: str, payload: Any) -> None:
    _count("halt")
    raise Terminal(reason, payload)


@step(unsafe_to_repeat=True)
def charge(amount: int) -> dict[str, Any]:
    _count("charge")
    return {"charged": amount}


@step
def ident() -> str:
    ctx = current()
    assert ctx is not None
    return str(ctx.workflow_id)


@workflow
def sequential(a: int, b: int) -> dict[str, Any]:
    total = add(a, b)
    doubled = double(total)
    pair_result = pair(doubled)
    ctx = current()
    assert ctx is not None
    return {
        "total": total,
        "doubled": doubled,
        "pair": pair_result,
        "seen": sorted(ctx.outcomes),
        "peek": peek("2"),
    }


@workflow(name="named-flow")
def named() -> list[Any]:
    first = echo("a", everystep_id="first")
    second = echo("b")
    third = echo("c", everystep_id="third")
    return [first, second, third]


@workflow
def forked() -> Any:
    head = echo("head")
    left, right, seq = parallel(
        lambda: echo("left"),
        lambda: echo("right", everystep_id="right"),
        [lambda: echo("s1"), lambda: echo("s2")],
        everystep_id="fan",
    )
    tail = echo("tail")
    return [head, left, right, seq, tail]


@workflow
def nested() -> Any:
    return parallel(
        lambda: parallel(lambda: echo("n00"), lambda: echo("n01")),
        [lambda: echo("n10"), lambda: parallel(lambda: echo("n110"), lambda: echo("n111"))],
    )


@workflow
def cleanup_on_failure(message: str) -> str:
    try:
        explode(message)
    except ValueError as exc:
        return cleanup(str(exc))
    return "unreachable"


@workflow
def failing() -> None:
    echo("before")
    explode("boom")


@workflow
def stop_from_step() -> None:
    echo("before-halt")
    halt("customer gone", {"customer": 42})
    echo("never")


@workflow
def stop_from_body(limit: int) -> None:
    echo("checked")
    raise Terminal("over the limit", {"limit": limit})


@workflow
def payment(amount: int) -> Any:
    echo("reserve")
    receipt = charge(amount)
    echo("notify")
    return receipt


@workflow
def evolving() -> Any:
    echo("one")
    value = double(2) if EVOLVED["on"] else add(1, 1)
    echo("three")
    return value


@workflow
def returns_tuple() -> Any:
    value = pair("x")
    return {"value": value, "is_list": isinstance(value, list)}


@workflow
def workflow_id_probe() -> Any:
    ctx = current()
    assert ctx is not None
    return [str(ctx.workflow_id), ident()]


@workflow
def bad_step_id(name: str) -> None:
    echo("ok", everystep_id=name)


@workflow
def duplicate_step_id() -> None:
    echo("x", everystep_id="same")
    echo("y", everystep_id="same")


# -- used by the worker acceptance tests (executed in worker subprocesses) -------------


def _log_start(step_name: str) -> Any:
    import os

    from django.utils import timezone

    from tests.testapp.models import Execution

    ctx = current()
    assert ctx is not None
    return Execution.objects.create(
        run_id=ctx.workflow_id, step=step_name, pid=os.getpid(), started_at=timezone.now()
    )


def _log_end(row: Any) -> None:
    from django.utils import timezone

    row.finished_at = timezone.now()
    row.save(update_fields=["finished_at"])


@step
def tracked(label: str, seconds: float = 0.0) -> dict[str, Any]:
    import os
    import time

    row = _log_start(label)
    time.sleep(seconds)
    _log_end(row)
    return {"label": label, "pid": os.getpid()}


@workflow
def three_steps(index: int) -> list[Any]:
    return [tracked(f"a{index}", 0.005), tracked(f"b{index}", 0.005), tracked(f"c{index}", 0.005)]


@workflow
def slow(seconds: float) -> list[Any]:
    return [tracked("first"), tracked("long", seconds), tracked("last")]


@step
def delete_own_run() -> None:
    from everystep.models import Workflow

    ctx = current()
    assert ctx is not None
    Workflow.objects.filter(id=ctx.workflow_id).delete()


@workflow
def self_destruct() -> None:
    echo("before-delete")
    delete_own_run()
    echo("after-delete")


class PickyError(Exception):
    """Cannot be rebuilt from its stored args (keyword-only constructor)."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"picky {code}")
        self.code = code


@step
def picky() -> None:
    _count("picky")
    raise PickyError(code=7)


@workflow
def catches_picky() -> str:
    try:
        picky()
        outcome = "no error"
    except PickyError:
        outcome = "PickyError"
    except StepFailure:
        outcome = "StepFailure"
    echo("after-picky")
    return outcome


@step
def cancel_own_run() -> None:
    from everystep.store.audit import Actor
    from everystep.store.runs import cancel_run

    ctx = current()
    assert ctx is not None
    cancel_run(str(ctx.workflow_id), actor=Actor("the test", "test"))


@workflow
def self_cancel() -> None:
    echo("before-cancel")
    cancel_own_run()
    echo("after-cancel")


@step(atomic=True)
def hold_in_transaction(marker: str, seconds: float) -> str:
    """An atomic step: its transaction holds the run row's lock while it sleeps. The
    marker file says it has begun (a row it wrote would not be seen before its commit)."""
    import pathlib
    import time

    pathlib.Path(marker).touch()
    time.sleep(seconds)
    return "held"


@workflow
def atomic_hold(marker: str, seconds: float) -> str:
    return hold_in_transaction(marker, seconds)


@workflow
def exits_after_a_step(code: int) -> None:
    """A step, then ``exit()``: the run fails, its step kept."""
    add(1, 1)
    raise SystemExit(code)


@step
def at_gate(label: str, gate: str) -> str:
    """Logged as started, then waits until the file ``gate`` exists (two minutes at most):
    a worker can be killed or stopped while the step runs."""
    import pathlib
    import time

    row = _log_start(label)
    deadline = time.monotonic() + 120
    while not pathlib.Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} was never opened")
        time.sleep(0.02)
    _log_end(row)
    return label


@workflow
def gated(label: str, gate: str) -> list[Any]:
    """A step, a step waiting at ``gate``, a step (issue 56's process groups)."""
    return [tracked(f"{label}:a"), at_gate(f"{label}:gate", gate), tracked(f"{label}:c")]
