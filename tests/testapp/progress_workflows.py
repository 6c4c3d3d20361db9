"""Workflows that publish their progress (``everystep.publish``), for the tests of
``published``, ``watch`` and ``awatch`` (tests/integration/test_progress.py). Imported by
the test app's ``ready()``, so that a worker subprocess knows them too.

A step that must not run on before the test has seen a value waits at a *gate*: a file
the test creates in a directory both processes see (a worker subprocess shares no
``threading.Event`` with the test), named by the step and opened by the test."""

from __future__ import annotations

import time
from pathlib import Path

from everystep import publish, sleep, step, wait_for, workflow

# Long enough for a slow CI machine, short enough that a test whose reader never opens
# the gate fails (the step raises, the run fails) instead of hanging.
GATE_WAIT = 20.0


def open_gate(gate: str | Path, name: str) -> None:
    """Let the step waiting at ``name`` in directory ``gate`` run on."""
    (Path(gate) / name).touch()


def at_gate(gate: str | Path, name: str) -> bool:
    """Whether a step has reached gate ``name`` (it may still be waiting there)."""
    return (Path(gate) / f"{name}.waiting").exists()


def wait_gate(gate: str | None, name: str) -> None:
    """Block until the test opens gate ``name``; no gate (None): go on at once."""
    if gate is None:
        return
    (Path(gate) / f"{name}.waiting").touch()
    path = Path(gate) / name
    deadline = time.monotonic() + GATE_WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {name} was not opened within {GATE_WAIT}s")
        time.sleep(0.005)


@step
def count_up(n: int, gate: str | None) -> int:
    """Publishes ``i`` = 0 … n-1, each held at its gate ``i-<i>`` until the test saw it."""
    for i in range(n):
        publish("i", i)
        wait_gate(gate, f"i-{i}")
    return n


@workflow
def counting(n: int, gate: str | None = None) -> int:
    """A body's stage around a step that counts in public."""
    publish("stage", "counting")
    total = count_up(n, gate)
    publish("stage", "done")
    return total


@step
def load_rows(rows: int) -> int:
    publish("rows", {"done": rows, "of": rows})
    return rows


@workflow
def sleeps_between(rows: int) -> str:
    """Values from the body and from a step, a durable sleep, then one more value."""
    publish("started", True)  # published once, before the sleep
    load_rows(rows)
    publish("stage", "before the sleep")
    sleep(3600)
    publish("stage", "after the sleep")
    return "woke"


@workflow
def publishes_then_waits(label: str) -> None:
    """Publishes, then waits for an event nobody sends: a run that does not end."""
    publish("stage", label)
    wait_for("never")


@step
def publish_sized(key: str, size: int) -> str:
    """Publishes a string of ``size`` characters under ``key``."""
    publish(key, "x" * size)
    return key


@workflow
def publishes_one(key: str, size: int) -> str:
    return publish_sized(key, size)


@step
def publish_keys(count: int) -> int:
    for n in range(count):
        publish(f"key_{n}", n)
    return count


@workflow
def publishes_keys(count: int) -> int:
    return publish_keys(count)


@step
def same_twice(value: str) -> str:
    publish("stage", value)
    publish("stage", value)
    return value


@workflow
def republishes(value: str) -> str:
    """The same value under one key, from the body and from two steps."""
    publish("stage", value)
    same_twice(value)
    same_twice(value)
    publish("stage", value)
    return value


@step
def part(label: str, gate: str | None) -> str:
    """Waits at gate ``part`` (if any), then publishes ``label``."""
    wait_gate(gate, "part")
    publish("part", label)
    return label


@workflow
def in_two_parts(label: str, gate: str | None = None) -> str:
    """Two steps that publish; the second's value and gate come from the arguments, so
    a fork from step 2 with other arguments publishes values of its own."""
    publish("stage", "first")
    part("first", None)
    second = part(f"second {label}", gate)
    publish("stage", "finished")
    return second


@workflow
def reports(n: int) -> int:
    """One value from the body, and done."""
    publish("n", n)
    return n
