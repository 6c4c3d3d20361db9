"""The async twin of ``tests.testapp.shapes``: one ``async def`` workflow that runs any
shape, for the crash-point tests of async bodies (issue 36).

The same shapes and steps, awaited: the sync steps of ``shapes`` run on threads, and the
``avalue`` leaf is an ``async def`` step that awaits a random few milliseconds, so
concurrent branches finish in another order on every pass. A ``par`` node awaits its
branches together with ``asyncio.gather`` (each branch a task of its own, so its ids are
its own scope's), running every branch to the end and raising as ``parallel()`` does. No
``patch`` node: ``patched()`` is not available in async bodies.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

from everystep import Terminal, step, workflow
from everystep.engine.operations.parallel import raise_failures
from everystep.errors import EffectUncertain, RunInterrupted, WorkflowCodeError
from tests.testapp import shapes
from tests.testapp.shapes import Node

WORKFLOW = "everystep-tests-async-shape"


@step
async def avalue_step(label: str, value: Any) -> Any:
    """``shapes.value_step``, awaiting 0 to 3 ms first: completion order changes per pass."""
    shapes._count()
    await asyncio.sleep(random.random() * 0.003)
    return shapes.RESULTS[label]


@workflow(name=WORKFLOW)
async def arun_shape(shape: Node) -> Any:
    """Walk ``shape`` as ``shapes.run_shape`` does, awaiting."""
    return await evaluate(shape)


async def evaluate(node: Node) -> Any:
    return await _EVALUATE[node["k"]](node)


_STEPS: dict[str, Callable[..., Any]] = {
    "value": shapes.value_step,
    "unsafe": shapes.unsafe_step,
    "atomic": shapes.atomic_step,
    "avalue": avalue_step,
}


async def _value(node: Node) -> Any:
    got = await _STEPS[node["k"]](node["label"], node["value"], everystep_id=_step_id(node))
    return [shapes.fingerprint(got), got]


def _step_id(node: Node) -> str | None:
    return node["label"] if node.get("named") else None


async def _fail(node: Node) -> Any:
    return await shapes.failing_step(node["label"], node["error"], everystep_id=_step_id(node))


async def _stop_step(node: Node) -> Any:
    return await shapes.stop_step(node["label"], everystep_id=_step_id(node))


async def _stop_body(node: Node) -> Any:
    raise Terminal(f"stop {node['label']}", {"label": node["label"], "by": "body"})


async def _seq(node: Node) -> Any:
    return [await evaluate(item) for item in node["items"]]


async def _branch(node: Node) -> Any:
    if node["k"] == "seq":
        return tuple([await evaluate(item) for item in node["items"]])
    return await evaluate(node)


# As parallel(): control flow first, then code changes, uncertain effects, Terminal.
_PRECEDENCE = (RunInterrupted, WorkflowCodeError, EffectUncertain, Terminal)


async def _par(node: Node) -> Any:
    outcomes = await asyncio.gather(
        *(_branch(branch) for branch in node["branches"]), return_exceptions=True
    )
    raised = [item for item in outcomes if isinstance(item, BaseException)]
    for kind in _PRECEDENCE:
        for exc in raised:
            if isinstance(exc, kind):
                raise exc
    if raised:
        raise_failures(raised, "parallel branches")
    return list(outcomes)


async def _try(node: Node) -> Any:
    try:
        return ["ok", await evaluate(node["body"])]
    except Exception as exc:
        return ["caught", shapes.describe(exc), await evaluate(node["handler"])]


_EVALUATE: dict[str, Callable[[Node], Coroutine[Any, Any, Any]]] = {
    "value": _value,
    "unsafe": _value,
    "atomic": _value,
    "avalue": _value,
    "fail": _fail,
    "stop_step": _stop_step,
    "stop_body": _stop_body,
    "seq": _seq,
    "par": _par,
    "try": _try,
}
