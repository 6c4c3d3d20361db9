"""The replay check: would the unfinished runs replay against the code installed now?

Each run is replayed the way a worker's next pass would replay it — the body runs,
recorded outcomes are served, ``context.current()`` and recorded results steer it as
they will — except that nothing is written and no step body runs: the replay stops at
the first step or wait with no record (``ReachedNewWork``), which is new work the new
code is free to do its own way. A ``patched`` call with no record is decided as a worker
would decide it, but not recorded, so an old run is followed down its old branch. What
it can find:

- a recorded step, wait or patch where the body now calls something else
  (``WorkflowCodeError``, with the step id and both functions);
- a run of a workflow the code no longer registers;
- anything else the body would now raise on replay (a changed signature, a removed
  ``except``), and ``deprecate_patch`` meeting a run that took the old branch.

It also counts, per workflow and change id, the runs that take each patch's old branch,
so a team knows when ``deprecate_patch`` is safe. The runs are read in batches, each in a
read-only transaction (``everystep.store.replay_check``); no claim is taken, so the
check runs beside live workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from everystep import registry
from everystep.engine.core import kinds
from everystep.engine.core.pass_state import AsyncPass, RunState
from everystep.engine.execute import replay_here
from everystep.errors import (
    EffectUncertain,
    ReachedNewWork,
    RunInterrupted,
    Suspended,
    Terminal,
    WorkflowCodeError,
)
from everystep.store import database
from everystep.store.replay_check import CHECKED_STATUSES, RunToCheck, read_only, unfinished_batch
from everystep.values import Claim

BATCH = 200
RUNNER = "everystep_check_replay"


@dataclass(frozen=True)
class Failure:
    """A run that would fail after the deploy, and where."""

    run_id: uuid.UUID
    status: str
    reason: str
    step_id: str | None = None
    recorded: str | None = None  # what the run recorded at step_id
    called: str | None = None  # what the installed code calls there


@dataclass
class WorkflowReport:
    workflow: str
    checked: int = 0
    failures: list[Failure] = field(default_factory=list)
    # change id → [runs on the new branch, runs on the old branch]
    patches: dict[str, list[int]] = field(default_factory=dict)
    # Runs that take a patch's new branch not recorded yet: once a worker on this code
    # records it, workers on the code before it hand them back (``Deploying a change``).
    moving_on: int = 0


@dataclass
class Report:
    workflows: dict[str, WorkflowReport] = field(default_factory=dict)
    checked: int = 0
    truncated: bool = False  # the limit stopped the check before every run was seen
    # Every unfinished run of the checked workflows was seen: a patch no run takes the old
    # branch of can then be deprecated.
    complete: bool = False

    @property
    def failing(self) -> int:
        return sum(len(report.failures) for report in self.workflows.values())


def check_replay(
    statuses: tuple[str, ...] = CHECKED_STATUSES,
    workflow: str | None = None,
    limit: int | None = None,
) -> Report:
    """Replay the unfinished runs in ``statuses`` (of ``workflow``, or all; at most
    ``limit``, oldest first) against the installed code, writing nothing."""
    report = Report()
    for run in _runs(statuses, workflow, limit, report):
        entry = report.workflows.setdefault(run.workflow, WorkflowReport(run.workflow))
        entry.checked += 1
        report.checked += 1
        failure, patches = check_run(run)
        if failure is not None:
            entry.failures.append(failure)
        for change_id, new_branch in patches.items():
            entry.patches.setdefault(change_id, [0, 0])[0 if new_branch else 1] += 1
        if failure is None and any(
            new_branch and not _recorded_patch(run, change_id)
            for change_id, new_branch in patches.items()
        ):
            entry.moving_on += 1
    report.complete = not report.truncated and set(statuses) >= set(CHECKED_STATUSES)
    return report


def _runs(
    statuses: tuple[str, ...], workflow: str | None, limit: int | None, report: Report
) -> Iterator[RunToCheck]:
    after: uuid.UUID | None = None
    left = limit
    while left is None or left > 0:
        size = BATCH if left is None else min(BATCH, left)
        with read_only():
            batch = unfinished_batch(statuses, workflow, after, size)
            # Replayed inside the batch's transaction: waits read events there too.
            yield from batch
        if len(batch) < size:
            return
        after = batch[-1].run_id
        if left is not None:
            left -= len(batch)
    report.truncated = bool(
        unfinished_batch(statuses, workflow, after, 1) if after is not None else False
    )


def _recorded_patch(run: RunToCheck, change_id: str) -> bool:
    """Whether ``run`` has recorded its decision of patch ``change_id`` already."""
    suffix = f"patched {change_id}"
    return any(
        record.name == kinds.PATCHED.record and record.step_id.endswith(suffix)
        for record in run.records.values()
    )


def check_run(run: RunToCheck) -> tuple[Failure | None, dict[str, bool]]:
    """Replay one run without writing: how it would fail (None: it replays), and the
    patch decisions it takes (change id → new branch)."""
    defn = registry.definition(run.workflow)
    if defn is None:
        reason = f"no @workflow is registered under {run.workflow!r} in the installed code"
        return Failure(run.run_id, run.status, reason, recorded=run.workflow), {}
    state, outcome = check_pass(run, defn)
    return failure_of(run, outcome), dict(state.patches)


def check_pass(
    run: RunToCheck, defn: registry.WorkflowDef, *, roll_back: bool = False
) -> tuple[RunState, BaseException | None]:
    """Replay ``run``'s body over its records in checking mode: the pass's state (what it
    reached, the patch decisions it took) and how it ended. ``roll_back``: undo whatever
    the body wrote between its steps, for a check made outside a read-only transaction
    (``everystep.fork``)."""
    # A claim in name only: a checking pass writes nothing, so nothing is fenced by it.
    claim = Claim(run.run_id, uuid.UUID(int=0), RUNNER, workflow=run.workflow, args=run.args)
    state = RunState(
        claim=claim,
        workflow_name=run.workflow,
        records=dict(run.records),
        threads_allowed=False,  # branches share this thread's transaction
        checking=True,
        aio=AsyncPass() if defn.is_async else None,
    )
    # A savepoint: a statement the database refuses (a body writing between its steps)
    # must not spoil the batch's transaction for the runs after this one.
    with database.atomic():
        _, outcome = replay_here(state, defn, run.args)
        if roll_back:
            database.set_rollback()
    return state, outcome


def failure_of(run: RunToCheck, outcome: BaseException | None) -> Failure | None:
    # Replayed up to new work, a wait, the end, a deliberate stop, or an uncertain
    # step that is blocked whatever the code: the new code takes it from there.
    if outcome is None or isinstance(
        outcome, ReachedNewWork | Suspended | Terminal | EffectUncertain
    ):
        return None
    if isinstance(outcome, RunInterrupted):  # the database went away: no verdict
        raise outcome
    if isinstance(outcome, WorkflowCodeError):
        return Failure(
            run.run_id,
            run.status,
            str(outcome),
            outcome.step_id,
            outcome.recorded,
            outcome.called,
        )
    reason = f"the body raises {type(outcome).__qualname__}: {outcome}"
    return Failure(run.run_id, run.status, reason)
