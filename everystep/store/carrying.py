"""Due runs that wait for code: runs a worker leaves because it does not have their code
(``claims._carried``), and which of them no live worker can carry at all.

Such runs are not claimed, so they stay at the head of the due order: these reads walk
the same (status, due_at, id) index as a claim and stop after ``LIMIT`` rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, Q
from django.utils import timezone

from everystep.models import Status, Workflow
from everystep.store.runners import live_runners
from everystep.values import Carrying

LIMIT = 1000


@dataclass(frozen=True)
class Waiting:
    """Due runs of one name that no live worker can carry: how many, and why."""

    name: str
    count: int
    why: str


def not_carried_by(carrying: Carrying) -> Counter[str]:
    """The due runs a worker with ``carrying`` does not claim, counted by name (at most
    ``LIMIT`` runs read)."""
    version = carrying.code_version
    taken = (
        Q(name__in=carrying.names) | Q(code_version__isnull=True) | Q(code_version=version)
    ) & (Q(handed_back_by__isnull=True) | ~Q(handed_back_by=version))
    rows = (
        Workflow.objects.filter(status=Status.SCHEDULED, due_at__lte=timezone.now())
        .exclude(taken)
        .order_by("due_at", "id")
        .values_list("name", flat=True)[:LIMIT]
    )
    return Counter(rows)


def live_carriers() -> list[Carrying | None]:
    """What each live worker that is not draining can carry (None: a worker of a
    release that does not say, which claims every run)."""
    rows = live_runners().filter(draining=False).values_list("code_version", "carries")
    return [
        None if version is None or names is None else Carrying(version, tuple(names))
        for version, names in rows
    ]


def carries(carrying: Carrying | None, name: str, version: str | None, back: str | None) -> bool:
    """Whether a worker with ``carrying`` claims a run named ``name``, scheduled by code
    ``version`` and handed back by ``back`` (``claims._carried``, in Python)."""
    if carrying is None:
        return True
    mine = carrying.code_version
    known = name in carrying.names or version is None or version == mine
    return known and back != mine


def waiting_for_code() -> list[Waiting]:
    """The due runs no live worker can carry, by name: none when no worker is live (then
    nothing is claimed at all, which the runners page says on its own)."""
    carriers = live_carriers()
    if not carriers:
        return []
    groups = (
        Workflow.objects.filter(status=Status.SCHEDULED, due_at__lte=timezone.now())
        .order_by()
        .values_list("name", "code_version", "handed_back_by")
        .annotate(n=Count("id"))
    )
    counts: Counter[str] = Counter()
    whys: dict[str, str] = {}
    for name, version, back, n in groups:
        if any(carries(carrier, name, version, back) for carrier in carriers):
            continue
        counts[name] += n
        whys.setdefault(
            name,
            f"handed back by code {back}: its records show newer code"
            if back is not None and name in _all_names(carriers)
            else f"no live worker has it (scheduled by code {version})",
        )
    return [Waiting(name, counts[name], whys[name]) for name in sorted(counts)]


def _all_names(carriers: list[Carrying | None]) -> set[str]:
    return {name for carrier in carriers if carrier is not None for name in carrier.names}
