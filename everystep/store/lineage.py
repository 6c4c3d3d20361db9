"""A run's forks, as the run page and ``everystep_show`` link them: the run it was
forked from and the runs forked from it (``everystep.fork``)."""

from __future__ import annotations

from dataclasses import dataclass

from everystep.models import FINAL_STATUSES, Workflow

# A run's JSON columns, left out: each can be megabytes, and a link needs none of them.
_PAYLOADS = ("args", "result", "error")


@dataclass(frozen=True)
class Lineage:
    """The run ``origin`` a run was forked from (None: it is no fork, or that run was
    pruned), its first ``forks``, oldest first, and whether it has more than those."""

    origin: Workflow | None
    forks: list[Workflow]
    more: bool


def run_lineage(run: Workflow, limit: int) -> Lineage:
    """``run``'s origin and its first ``limit`` forks: a statement for each, and none
    for what cannot exist (only a fork has an origin, only a finished run has forks)."""
    origin = None
    if run.forked_from_id is not None:
        origin = Workflow.objects.defer(*_PAYLOADS).filter(id=run.forked_from_id).first()
    if run.status not in FINAL_STATUSES:
        return Lineage(origin, [], False)
    # One more than shown: whether there are more, without counting them.
    found = Workflow.objects.defer(*_PAYLOADS).filter(forked_from_id=run.id).order_by("id")
    forks = list(found[: limit + 1])
    return Lineage(origin, forks[:limit], len(forks) > limit)
