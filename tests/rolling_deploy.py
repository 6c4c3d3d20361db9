"""A rolling deploy under load, from the old code tree to the new (``tests.code_trees``):
the short variant in the suite (``tests/integration/test_rolling_deploy.py``) and the
full one in ``bench/rolling_deploy.py`` run this.

1. ``workers`` worker processes on the old code, named ``roll-0`` …, start.
2. A web process on the old code schedules a quarter of the runs: ``deploy.kept``, half
   of them sleeping ``pause`` seconds after their steps, so across the deploy.
3. A web process on the new code schedules the rest in batches while the deploy goes on:
   half of all runs are ``deploy.added`` (which the old code lacks), the rest
   ``deploy.kept`` (which the new code changed behind ``patched("faster")``), half of
   those sleeping too.
4. Meanwhile each worker in turn gets SIGTERM, drains, exits, and is started again on
   the new code under its name, ``gap`` seconds apart.
5. Then everything must end: every run completed, none failed, none left, and no step
   body executed twice (``Execution`` rows per run and step).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.code_trees import env_of
from tests.workers import ROOT, worker_command

SCHEDULE = """
import json, sys, time
import django
django.setup()
from everystep import schedule
from deployapp.workflows import {names}
runs, batch, pause, gap, added = {runs}, {batch}, {pause}, {gap}, {added}
ids = []
for start in range(0, runs, batch):
    for n in range(start, min(start + batch, runs)):
        if added and n % 2 == 0:
            ids.append(schedule(added_wf, n).id)
        else:
            ids.append(schedule(kept, n, pause if n % 4 in (1, 2) else 0).id)
    time.sleep(gap)
print(json.dumps([str(i) for i in ids]))
"""


@dataclass
class Outcome:
    """What a rolling deploy left: counts of runs by their end, and step bodies run twice."""

    runs: int
    completed: int
    failed: int
    unfinished: int
    executed_twice: int
    handed_back: int
    seconds: float
    failures: list[str]

    def line(self) -> str:
        return (
            f"{self.runs} runs: {self.completed} completed, {self.failed} failed, "
            f"{self.unfinished} unfinished, {self.executed_twice} step bodies run twice, "
            f"{self.handed_back} handed back by an old worker, {self.seconds:.1f} s"
        )


def _scheduler(tree: Path, *, runs: int, batch: int, pause: float, gap: float, added: bool):
    names = "kept, added as added_wf" if added else "kept"
    script = SCHEDULE.format(names=names, runs=runs, batch=batch, pause=pause, gap=gap, added=added)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        env=env_of(tree),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ids(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"a scheduling process failed: {err}")
    return list(json.loads(out.strip().splitlines()[-1]))


def _start(tree: Path, name: str, logs: Path, pool: int) -> subprocess.Popen[bytes]:
    command = worker_command(name, ["--poll", "0.05", "--pool", str(pool), "--drain", "60"])
    # The child keeps its own copy of the file: this process's is closed at once.
    with open(logs / f"{name}-{tree.name}.log", "ab") as log:
        return subprocess.Popen(
            command, cwd=ROOT, env=env_of(tree), stdout=log, stderr=subprocess.STDOUT
        )


def roll(
    old: Path,
    new: Path,
    logs: Path,
    *,
    runs: int,
    workers: int = 3,
    pool: int = 8,
    pause: float = 3.0,
    gap: float = 2.0,
    timeout: float = 300.0,
) -> Outcome:
    """Run the deploy described above; the ORM of the calling process reads the outcome."""
    from django.db.models import Count

    from everystep.models import Status, Workflow
    from tests.testapp.models import Execution

    began = time.monotonic()
    fleet = {f"roll-{i}": _start(old, f"roll-{i}", logs, pool) for i in range(workers)}
    try:
        old_web = _scheduler(
            old, runs=runs // 4, batch=max(runs // 16, 1), pause=pause, gap=0.2, added=False
        )
        new_web = _scheduler(
            new,
            runs=runs - runs // 4,
            batch=max(runs // 12, 1),
            pause=pause,
            gap=gap / 2,
            added=True,
        )
        ids = _ids(old_web)
        for name in list(fleet):
            time.sleep(gap)
            fleet[name].send_signal(signal.SIGTERM)
            if fleet[name].wait(120) != 0:
                raise RuntimeError(f"old worker {name} exited with {fleet[name].returncode}")
            fleet[name] = _start(new, name, logs, pool)
        ids += _ids(new_web)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = Workflow.objects.filter(id__in=ids).exclude(
                status__in=[Status.COMPLETED, Status.FAILED]
            )
            if not left.exists():
                break
            time.sleep(0.2)
    finally:
        for proc in fleet.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in fleet.values():
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    seconds = time.monotonic() - began
    rows = Workflow.objects.filter(id__in=ids)
    by_status: dict[str, int] = dict(
        rows.order_by().values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    twice = (
        Execution.objects.filter(run_id__in=ids)
        .values("run_id", "step")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    failures: list[Any] = [
        f"{run.id} {run.name}: {(run.error or {}).get('message')}"
        for run in rows.filter(status=Status.FAILED)[:5]
    ]
    return Outcome(
        runs=len(ids),
        completed=by_status.get(Status.COMPLETED, 0),
        failed=by_status.get(Status.FAILED, 0),
        unfinished=len(ids) - by_status.get(Status.COMPLETED, 0) - by_status.get(Status.FAILED, 0),
        executed_twice=twice,
        handed_back=rows.exclude(handed_back_by=None).count(),
        seconds=seconds,
        failures=failures,
    )
