"""Chaos in CI: the chaos mix (``tests/testapp/chaos.py``) through SIGKILLs and, on
PostgreSQL and MariaDB, a SIGSTOP past the orphan timeout and a database server restart;
``bench/chaos.py`` is the same with 10,000 runs and random timing."""

from __future__ import annotations

import contextlib
import pprint
import signal
import subprocess
import time
from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection, connections

from everystep.models import Workflow
from tests.acceptance.conftest import WorkerProcess, database_server, wait_until
from tests.testapp import chaos, chaos_checks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

RUNS = 300  # scheduled in batches, one before each disturbance: the victim has work
PAUSE = 0.01  # seconds each step body sleeps, so a kill often lands inside one
# The orphan timeout must outlast a server restart (1-4 s here) with room to spare on a
# busy machine, or live workers whose first heartbeat after it comes late would be taken
# for dead and their steps in flight run again.
FLAGS = ("--pool", "4", "--poll", "0.05", "--heartbeat", "0.5", "--orphan-timeout", "8")
WAIT = 120


def chaos_steps(run_id: object) -> list[tuple[str, str]]:
    from everystep.models import Step

    return list(Step.objects.filter(workflow_id=run_id).values_list("step_id", "status"))


def _count(query: Callable[[], int]) -> int:
    """``query()``, or -1 while the database is unreachable (a restart just happened)."""
    try:
        return query()
    except DatabaseError:
        connections.close_all()
        return -1


class Fleet:
    """The test's workers, and what the test did to them."""

    def __init__(self, start: Callable[..., WorkerProcess], batch: int) -> None:
        self.start = start
        self.batch = batch
        self.procs: dict[str, WorkerProcess] = {}
        self.events: list[chaos.Interruption] = []
        self.scheduled = 0

    def launch(self, name: str) -> None:
        self.procs[name] = self.start(name, *FLAGS)

    def more_work(self) -> None:
        chaos.schedule_mix(self.batch, PAUSE, first=self.scheduled)
        self.scheduled += self.batch

    def holding(self, name: str) -> frozenset[str]:
        return wait_until(lambda: chaos.held_runs(name), WAIT, f"{name} to hold a run")

    def kill(self, name: str, restart_as: str) -> None:
        """SIGKILL while it holds runs; start ``restart_as`` in its place."""
        proc = self.procs.pop(name)
        self.holding(name)
        proc.signal(signal.SIGKILL)
        proc.wait(30)
        # The kill's moment is taken once the process is gone: it may still begin a step
        # between this thread's reading of the clock and SIGKILL's delivery (a CI run on a
        # busy machine saw one begin in that gap, then counted as a re-execution no
        # interruption explained). Nothing it began can come after this.
        at = time.time()
        self.events.append(chaos.Interruption("kill", at, at, chaos.held_runs(name), proc.pid))
        self.launch(restart_as)

    def freeze(self, name: str) -> None:
        """SIGSTOP while it holds runs; SIGCONT once live workers have taken them over
        (its heartbeat is then older than the orphan timeout)."""
        proc = self.procs[name]
        self.holding(name)
        at = time.time()
        proc.signal(signal.SIGSTOP)
        # A claim it sent just before SIGSTOP may commit just after: what it holds is
        # every run seen under its name while it is frozen.
        held: set[str] = set()

        def taken_over() -> bool:
            now = chaos.held_runs(name)
            held.update(now)
            return not now

        try:
            wait_until(taken_over, WAIT, f"{name}'s runs taken over")
        finally:
            proc.signal(signal.SIGCONT)
        self.events.append(chaos.Interruption("stop", at, time.time(), frozenset(held), proc.pid))

    def restart_server(self) -> None:
        self.events.append(chaos.restart_server(database_server))

    def drain(self) -> None:
        """Until every run is terminal (blocked counts)."""
        total = self.scheduled
        try:
            wait_until(lambda: _count(chaos.terminal_count) == total, WAIT, "every run terminal")
        except AssertionError as exc:
            # Which runs, held by whom, with what recorded: the evidence a rare failure
            # needs, since the workers' logs are cut.
            stuck = (
                Workflow.objects.filter(name__in=chaos.NAMES)
                .exclude(status__in=chaos.TERMINAL)
                .values("id", "name", "status", "claimed_by", "due_at", "recoveries")[:20]
            )
            rows = "\n".join(f"{row} steps={list(chaos_steps(row['id']))}" for row in stuck)
            raise AssertionError(
                f"{exc}\nnot terminal:\n{rows}{self._stacks({row['claimed_by'] for row in stuck})}"
            ) from None

    def _stacks(self, holders: set[str | None]) -> str:
        """Every thread's stack of each live worker holding a stuck run: whether a pass
        hangs or the worker forgot the run (PYTHONFAULTHANDLER, see ``worker_env``)."""
        found = []
        for name in sorted(filter(None, holders)):
            proc = self.procs.get(name)
            if proc is None or proc.proc.poll() is not None:
                continue
            proc.proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.proc.wait(10)
            found.append(f"\n--- stacks of {name}\n{proc.log()[-6000:]}")
        return "".join(found)


@pytest.mark.exclusive  # restarts the database server (PostgreSQL, MariaDB)
def test_chaos_keeps_every_invariant(workers):
    """Through kills (and, with a server, a freeze and a restart) every run reaches its
    known outcome, no step is recorded twice, and only steps in flight at an
    interruption run again."""
    # SQLite: kills only. A process frozen inside a write transaction would hold the
    # one write lock, so every other worker waits until it resumes; and there is no server.
    server = connection.vendor != "sqlite"
    fleet = Fleet(workers, batch=RUNS // (5 if server else 3))
    fleet.more_work()
    for name in ("chaos-0", "chaos-1", "chaos-2"):
        fleet.launch(name)
    fleet.kill("chaos-0", restart_as="chaos-0")  # same name: catchup resumes its runs
    fleet.more_work()
    if server:
        fleet.freeze("chaos-1")
        fleet.more_work()
    fleet.kill("chaos-2", restart_as="chaos-3")  # new name: orphan recovery finds its runs
    if server:
        fleet.more_work()
        fleet.restart_server()
    fleet.more_work()
    fleet.kill("chaos-0", restart_as="chaos-0")
    fleet.drain()

    figures = chaos_checks.analyse(fleet.events)
    assert chaos_checks.problems(figures) == [], pprint.pformat(figures)
    assert figures["runs"] == fleet.scheduled == RUNS
    assert (figures["kills"], figures["stops"], figures["restarts"]) == (
        3,
        int(server),
        int(server),
    )
    assert all(event.held for event in fleet.events if event.kind != "restart")

    settled = chaos.settle_blocked()
    done = Workflow.objects.filter(id__in=settled, status="completed")
    wait_until(lambda: done.count() == len(settled), WAIT, "the settled runs to complete")
    after = chaos_checks.analyse(fleet.events)
    assert chaos_checks.problems(after) == [], pprint.pformat(after)
    assert after["statuses"].get("blocked", 0) == 0

    for proc in fleet.procs.values():
        proc.signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in fleet.procs.values()] == [0] * len(fleet.procs)
