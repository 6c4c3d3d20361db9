"""``everystep.fork``: re-run a finished run from a step, under the code installed now.

The fork is a new ``scheduled`` run of the same workflow that starts with copies of the
original's records made before ``from_step``; a worker replays those (their bodies do
not run again) and executes from ``from_step`` on. Which records come "before" is
decided by replaying the body, not by time or by id: a replay check over the original's
records, with ``from_step`` taken out, stops where it reaches ``from_step``, and the
records it reached on the way are the ones copied. So:

- in a sequence, the records up to ``from_step`` are copied, and nothing after it;
- when ``from_step`` lies inside a ``parallel()`` fork, the other branches replay to
  their ends (or to their own first step without an outcome) and keep their records;
  ``from_step``'s own branch keeps what comes before it;
- sleeps, event waits, waits for runs, patch decisions and child starts recorded before
  the point are copied like steps: a copied sleep is over, a copied wait's event or
  outcome is served again, a copied patch decision keeps the original's branch, a copied
  ``start`` names the original's child (no second child is started; it stays the
  original's child);
- a record without an outcome (an unsafe step's ``started`` record, a wait in progress)
  is never copied: the fork does that operation again.

Without ``from_step`` the fork executes from every step that failed or has no outcome:
each failed record is left out, so each failed branch starts again at its failed step.

Before anything is written, the fork's own replay is checked the way
``everystep_check_replay`` checks a run (with the new arguments, over exactly the copied
records): a fork that would fail or stop again on replay is refused with the reason.
Only finished runs are forked: a live run would race its fork for the same work. Runs
of everystep's own workflows (``everystep.bulk_action``) are never forked: their
arguments carry an operator's action and name, which a fork would take again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from everystep import registry, serde, shapes
from everystep.errors import EverystepError, ReachedNewWork, RunInterrupted, Terminal
from everystep.models import FINAL_STATUSES, Status, StepStatus, Workflow, uuid7
from everystep.replays.check import check_pass, failure_of
from everystep.store import audit
from everystep.store.forks import BUILTIN_WORKFLOWS, create_fork, existing_fork
from everystep.store.replay_check import RunToCheck
from everystep.store.runs import get_run, load_steps
from everystep.values import RecordedStep

logger = logging.getLogger("everystep.ops")


@dataclass(frozen=True)
class Plan:
    """What a fork starts with: the ids of the records it copies, and where its new work
    begins (None: the replay reached the body's end; the fork completes on replay)."""

    copied: frozenset[str]
    from_step: str | None


def fork_run(
    run: Workflow | UUID | str,
    *,
    from_step: str | None = None,
    args: Sequence[Any] | None = None,
    actor: audit.Actor | None = None,
    idempotency_key: str | None = None,
) -> Workflow:
    """Fork the finished run ``run`` (see the module's docstring); ``args`` replace its
    arguments (Python values, stored as ``schedule()`` stores them). An operator's fork
    (``actor``) is audited. Refused with an ``EverystepError`` saying why: an unknown
    run, one not finished, a run of everystep's own (``builtin_refusal``), an unknown
    step, a workflow not registered here, arguments that cannot be stored, or a fork that
    would fail on replay. Nothing is written then.
    ``idempotency_key`` (the UI's confirmation): a fork already made with it is returned,
    and nothing is written either."""
    original = _finished_run(run)
    refused = builtin_refusal(original.name)
    if refused is not None:
        raise EverystepError(f"cannot fork run {original.id}: {refused}")
    made = existing_fork(original, idempotency_key)
    if made is not None:
        return made
    defn = registry.definition(original.name)
    if defn is None:
        raise EverystepError(
            f"cannot fork run {original.id}: no @workflow is registered under "
            f"{original.name!r} in the installed code"
        )
    stored = original.args if args is None else _stored_args(original, args)
    records = load_steps(original.id)
    new_id = uuid7()
    plan = plan_fork(original, new_id, stored, records, from_step)
    fork = create_fork(
        original,
        new_id=new_id,
        args=stored,
        from_step=plan.from_step,
        copied=plan.copied,
        actor=actor,
        idempotency_key=idempotency_key,
    )
    logger.info(
        "run %s forked as %s from step %s (%d record(s) copied)%s",
        original.id,
        fork.id,
        plan.from_step or "(none: the fork replays to the end)",
        len(plan.copied),
        f" by {actor.by}" if actor is not None else "",
        extra={
            "event": "run.forked",
            "run_id": str(original.id),
            "fork_id": str(fork.id),
            "from_step": plan.from_step,
            "workflow": original.name,
        },
    )
    return fork


def builtin_refusal(name: str) -> str | None:
    """Why runs of workflow ``name`` cannot be forked, if it is one of everystep's own;
    else None. Refused at every door (``everystep.fork``, ``everystep_fork``, the UI): a
    bulk action's run carries the action, the filter and the operator who confirmed it,
    so its fork would take that action again, in that operator's name, for whoever may
    fork."""
    if name not in BUILTIN_WORKFLOWS:
        return None
    return (
        f"runs of {name} are everystep's own and cannot be forked; start a new bulk "
        "action from the runs list (or everystep_cancel, everystep_requeue or "
        "everystep_fork with filter flags)"
    )


def _finished_run(run: Workflow | UUID | str) -> Workflow:
    run_id = run.id if isinstance(run, Workflow) else run
    try:
        found = get_run(UUID(str(run_id)))
    except ValueError:
        raise EverystepError(f"{str(run_id)[:60]!r} is not a run id (a UUID)") from None
    if found is None:
        raise EverystepError(f"no run with id {run_id}")
    if found.status not in FINAL_STATUSES:
        raise EverystepError(
            f"run {found.id} is {found.status}: only finished runs (completed, failed, "
            "stopped, cancelled) can be forked; a live run would race its fork for the "
            "same work (cancel it first)"
        )
    return found


def _stored_args(original: Workflow, args: Sequence[Any]) -> Any:
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise EverystepError(f"the arguments must be a list, not {type(args).__name__}")
    if original.queue is not None and not (
        len(args) == 2 and isinstance(args[0], list | tuple) and isinstance(args[1], dict)
    ):
        raise EverystepError(
            f"run {original.id} is a task's run: its arguments are [args, kwargs] (a list "
            "and an object), as Django's TaskResult keeps them"
        )
    # Typed values where the installed workflow's parameters name them (a worker
    # rebuilds them from those annotations).
    defn = registry.lookup(original.name)
    if defn is None:
        return serde.encode(list(args), f"arguments of workflow {original.name}")
    return shapes.encode_arguments(defn.fn, list(args), f"arguments of workflow {original.name}")


def plan_fork(
    original: Workflow,
    new_id: UUID,
    args: Any,
    records: dict[str, RecordedStep],
    from_step: str | None,
) -> Plan:
    """Which of ``records`` the fork copies and where it executes from, decided by
    replaying the body under the installed code; then that fork's own replay, checked."""
    if from_step is not None and from_step not in records:
        raise EverystepError(
            f"run {original.id} has no record at step {from_step[:300]!r}; "
            "name one of its recorded steps (see everystep_show), or leave it out"
        )
    if from_step is None:
        left_out = {i for i, r in records.items() if r.status != StepStatus.DONE}
    else:
        left_out = {from_step} | {i for i, r in records.items() if r.status == StepStatus.STARTED}
    offered = {i: r for i, r in records.items() if i not in left_out}
    reached, stop = _replay(original, new_id, args, offered, from_step)
    copied = frozenset(reached & offered.keys())
    if stop is None and original.status == Status.COMPLETED:
        raise EverystepError(
            f"run {original.id} completed, and every step its body reaches has an outcome: "
            "a fork would only replay them; name the step to run again with from_step"
        )
    if from_step is not None and stop != from_step:
        where = f"step {stop}, which has no outcome," if stop else "the end of the body"
        raise EverystepError(
            f"cannot fork run {original.id} from step {from_step}: replayed under the "
            f"installed code, the body reaches {where} before it"
        )
    if copied != offered.keys():
        # Records the replay did not reach are not copied; check the replay once more
        # over exactly what the fork will hold (a patch decides by what is recorded).
        _replay(original, new_id, args, {i: offered[i] for i in copied}, from_step)
    return Plan(copied, stop)


def _replay(
    original: Workflow,
    new_id: UUID,
    args: Any,
    records: dict[str, RecordedStep],
    from_step: str | None,
) -> tuple[set[str], str | None]:
    """Replay the fork-to-be over ``records``: the ids it reached, and the step where its
    new work begins (None: it reached the end). A replay that fails is a refusal."""
    defn = registry.definition(original.name)
    assert defn is not None
    # The fork's own id: a wait with no record looks for events sent to the fork.
    run = RunToCheck(new_id, original.name, original.status, args, records)
    state, outcome = check_pass(run, defn, roll_back=True)
    if isinstance(outcome, ReachedNewWork):
        return state.visited, outcome.step_id
    if isinstance(outcome, Terminal):
        raise EverystepError(
            f"cannot fork run {original.id}: on replay it stops again before "
            f"{_point(from_step)} ({type(outcome).__qualname__}: {outcome}); fork from an "
            "earlier step"
        )
    if isinstance(outcome, RunInterrupted) and not isinstance(outcome, ReachedNewWork):
        raise outcome  # the database went away: no verdict
    failure = failure_of(run, outcome)
    if failure is not None:
        reason = failure.reason.replace(f"run {new_id}", f"the fork of run {original.id}")
        raise EverystepError(f"cannot fork run {original.id}: it would fail on replay: {reason}")
    return state.visited, None


def _point(from_step: str | None) -> str:
    return f"step {from_step}" if from_step else "its first failed or unrecorded step"
