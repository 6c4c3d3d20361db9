"""The chaos mix, shared by ``bench/chaos.py`` and ``tests/acceptance/test_chaos.py``.

Five workflows whose correct outcome follows from their arguments alone (sequential,
nested forks, a failure in a fork, a ``Terminal`` stop, an ``unsafe_to_repeat`` step);
every step body logs its execution to ``ChaosEffect`` before it sleeps ``pause`` seconds,
so a worker killed mid-body leaves evidence. The harness describes what it did to the
workers and the database as ``Interruption``s; ``tests.testapp.chaos_checks`` reads what
the run left in the database and names every invariant it breaks.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from everystep import Terminal, parallel, step, workflow
from everystep.context import current

MODULUS = 1_000_003
# Final for the harness: ``blocked`` is the correct end of a run whose unsafe step was
# interrupted mid-body (it waits for a human, who may then settle it).
TERMINAL = ("completed", "failed", "stopped", "blocked")
INSERT_PATIENCE = 180.0  # seconds a step body keeps retrying its log row


def mix(x: int) -> int:
    """What ``bump`` computes: deterministic, and scrambling, so a result served from
    the wrong step or the wrong run shows as a wrong outcome."""
    return (x * 7919 + 13) % MODULUS


# -- step bodies ----------------------------------------------------------------------


def _log_execution(pause: float) -> None:
    from django.utils import timezone

    ctx = current()
    assert ctx is not None and ctx.step_id is not None
    row = {
        "run_id": ctx.workflow_id,
        "step_id": ctx.step_id,
        "pid": os.getpid(),
        "token": uuid.uuid4(),
        "began_at": timezone.now(),
    }
    _insert_patiently(row)
    time.sleep(pause)


def _insert_patiently(row: dict[str, Any]) -> None:
    """Insert the log row, retrying through a database restart: a body that raised a
    database error would fail its run, and the harness must see only the library's
    mistakes. The unique token makes a retry whose first attempt landed harmless."""
    from django.db import IntegrityError, InterfaceError, OperationalError, connection

    from tests.testapp.models import ChaosEffect

    give_up = time.monotonic() + INSERT_PATIENCE
    while True:
        try:
            ChaosEffect.objects.create(**row)
            return
        except IntegrityError:
            return
        except (OperationalError, InterfaceError):
            if time.monotonic() > give_up or connection.in_atomic_block:
                raise
            connection.close()
            time.sleep(0.2)


@step
def bump(x: int, pause: float) -> int:
    _log_execution(pause)
    return mix(x)


@step
def boom(x: int, pause: float) -> None:
    _log_execution(pause)
    raise ValueError(f"chaos failure at {x}")


@step
def halt(x: int, n: int, pause: float) -> None:
    _log_execution(pause)
    raise Terminal("chaos stop", {"n": n, "value": x})


@step(unsafe_to_repeat=True)
def charge(x: int, pause: float) -> dict[str, int]:
    _log_execution(pause)
    return {"charged": x}


# -- workflows --------------------------------------------------------------------------


@workflow(name="chaos.sequential")
def sequential(n: int, pause: float) -> list[int]:
    values = [n]
    for _ in range(5):
        values.append(bump(values[-1], pause))
    return values[1:]


@workflow(name="chaos.forks")
def forks(n: int, pause: float) -> dict[str, Any]:
    head = bump(n, pause)
    a, (b, c), (d, e) = parallel(
        lambda: bump(head + 1, pause),
        [lambda: bump(head + 2, pause), lambda: bump(head + 3, pause)],
        lambda: parallel(lambda: bump(head + 4, pause), lambda: bump(head + 5, pause)),
    )
    return {"head": head, "branches": [a, b, c, d, e], "tail": bump(a + b + c + d + e, pause)}


@workflow(name="chaos.failing")
def failing(n: int, pause: float) -> str:
    head = bump(n, pause)
    parallel(lambda: bump(head, pause), lambda: boom(head, pause))
    return "unreachable"


@workflow(name="chaos.terminal")
def stopping(n: int, pause: float) -> int:
    head = bump(n, pause)
    halt(head, n, pause)
    return bump(head, pause)


@workflow(name="chaos.unsafe")
def unsafe(n: int, pause: float) -> dict[str, Any]:
    head = bump(n, pause)
    receipt = charge(head, pause)
    return {"receipt": receipt, "after": bump(head + 1, pause)}


MIX: tuple[Callable[..., Any], ...] = (sequential, forks, failing, stopping, unsafe)
NAMES = ("chaos.sequential", "chaos.forks", "chaos.failing", "chaos.terminal", "chaos.unsafe")
UNSAFE_STEP = "2"


def schedule_mix(count: int, pause: float, first: int = 0) -> None:
    """``count`` runs ``n = first, first + 1, …``, the five workflows in turn (run ``n``
    gets ``MIX[n % 5]``), in one transaction."""
    from django.db import transaction

    from everystep import schedule

    with transaction.atomic():
        for n in range(first, first + count):
            schedule(MIX[n % len(MIX)], n, pause)


# -- what each run must end with ----------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """The outcome a run must reach: its status, its result or the parts of its error
    that are fixed, and how many step rows it leaves."""

    status: str
    steps: int
    result: Any = None
    error: dict[str, Any] | None = None


def expected(name: str, args: list[Any]) -> Expected:
    n = args[0]
    head = mix(n)
    if name == "chaos.sequential":
        values = [mix(n)]
        for _ in range(4):
            values.append(mix(values[-1]))
        return Expected("completed", 5, result=values)
    if name == "chaos.forks":
        branches = [mix(head + i) for i in range(1, 6)]
        result = {"head": head, "branches": branches, "tail": mix(sum(branches))}
        return Expected("completed", 7, result=result)
    if name == "chaos.failing":
        error = {"type": "builtins.ValueError", "message": f"chaos failure at {head}"}
        return Expected("failed", 3, error=error)
    if name == "chaos.terminal":
        error = {"reason": "chaos stop", "payload": {"n": n, "value": head}}
        return Expected("stopped", 2, error=error)
    if name == "chaos.unsafe":
        result = {"receipt": {"charged": head}, "after": mix(head + 1)}
        return Expected("completed", 3, result=result)
    raise ValueError(f"not a chaos workflow: {name}")


def verdict(name: str, args: list[Any], status: str, result: Any, error: Any) -> str | None:
    """Why a run that reached ``status`` (a terminal one) is wrong, or None."""
    want = expected(name, args)
    if status == "blocked":
        return None if name == "chaos.unsafe" else "blocked, yet it has no unsafe step"
    if status != want.status:
        return f"{status} ({error}), expected {want.status}"
    if want.status == "completed" and result != want.result:
        return f"result {result!r}, expected {want.result!r}"
    got = error or {}
    if want.error and any(got.get(key) != value for key, value in want.error.items()):
        return f"error {got!r}, expected {want.error!r}"
    return None


# -- what the harness did -------------------------------------------------------------------


@dataclass(frozen=True)
class Interruption:
    """A disturbance the harness caused: ``kill`` (SIGKILL), ``stop`` (SIGSTOP, later
    SIGCONT) or ``restart`` (the database server down, then up again)."""

    kind: str
    start: float  # seconds since the epoch: the signal sent, or the server going down
    end: float  # SIGCONT sent, the server reachable again; = start for a kill
    # Ids of the runs the worker held (status running): at a SIGKILL, or at any time
    # while frozen (a claim sent just before SIGSTOP can commit after it). None: every
    # run (a server restart, whose start no snapshot can catch exactly).
    held: frozenset[str] | None
    pid: int | None = None  # the worker process; None: every worker (a server restart)

    def caught(self, pid: int | None, began: float, recorded: float | None) -> bool:
        """Whether an execution (by ``pid``, None: unknown) of a step of a held run that
        began at ``began``, whose step was first recorded at ``recorded`` (None: never),
        was in flight during this interruption."""
        if self.pid is not None and pid is not None and pid != self.pid:
            return False
        if recorded is not None and recorded <= self.start:
            return False
        if self.kind == "kill":
            return began <= self.start
        if self.kind == "restart":
            return began <= self.end
        return True  # stop: after SIGCONT the stale process carries on with what it held


def restart_server(
    server: Callable[[str], None], while_down: Callable[[], None] = lambda: None
) -> Interruption:
    """Stop the database server with ``server("stop")``, call ``while_down()``, start it
    again; the interruption ends when the server first answers, which ``pg_ctlcluster
    start`` only reports seconds later."""
    import threading

    from django.db import connections

    began = time.time()
    server("stop")
    connections.close_all()
    while_down()
    starter = threading.Thread(target=server, args=("start",), daemon=True)
    starter.start()
    back = _first_answer(timeout=180.0)
    starter.join()
    return Interruption("restart", began, back, None)


def _first_answer(timeout: float) -> float:
    """When (seconds since the epoch) a ``SELECT 1`` first succeeded."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + timeout
    while True:
        connection.close()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return time.time()
        except DatabaseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def running_claims() -> dict[str, str]:
    """Run id -> runner name, for every chaos run ``running`` now."""
    from everystep.models import Workflow

    running = Workflow.objects.filter(status="running", name__in=NAMES)
    return {str(run_id): who for run_id, who in running.values_list("id", "claimed_by")}


def held_runs(runner: str) -> frozenset[str]:
    """Ids of the chaos runs ``running`` under ``runner``."""
    return frozenset(run for run, who in running_claims().items() if who == runner)


def terminal_count() -> int:
    from everystep.models import Workflow

    return Workflow.objects.filter(name__in=NAMES, status__in=TERMINAL).count()


def settle_blocked() -> list[str]:
    """Settle every blocked run as the charge having gone through (its known result), so
    it resumes and completes; the ids settled."""
    from everystep.models import Workflow
    from everystep.store.audit import Actor
    from everystep.store.runs import resolve_step_from_text

    settled = []
    for run in Workflow.objects.filter(name__in=NAMES, status="blocked"):
        receipt = expected(run.name, run.args).result["receipt"]
        text = json.dumps(receipt)
        actor = Actor("chaos", "test")
        resolve_step_from_text(str(run.id), UNSAFE_STEP, mode="result", text=text, actor=actor)
        settled.append(str(run.id))
    return settled
