"""Runner heartbeats and requeueing the runs of runners that are gone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from everystep.claim import notify_due
from everystep.models import Runner, Status, Workflow


def requeue_runner(name: str) -> list[UUID]:
    """Put every run left ``running`` under runner ``name`` back to ``scheduled``."""
    with transaction.atomic():
        held = Workflow.objects.filter(status=Status.RUNNING, claimed_by=name)
        ids = list(held.values_list("id", flat=True))
        Workflow.objects.filter(id__in=ids, status=Status.RUNNING, claimed_by=name).update(
            status=Status.SCHEDULED,
            claimed_by=None,
            claim_token=None,
            updated_at=timezone.now(),
        )
        notify_due()
    return ids


def beat(
    name: str, boot_id: UUID, *, pool_size: int, inflight: int, draining: bool, started_at: Any
) -> None:
    """Record that runner ``name`` (this boot) is alive."""
    Runner.objects.update_or_create(
        name=name,
        defaults={
            "boot_id": boot_id,
            "pool_size": pool_size,
            "inflight": inflight,
            "draining": draining,
            "started_at": started_at,
            "last_seen": timezone.now(),
        },
    )


def get_runner(name: str) -> Runner | None:
    """The heartbeat row of runner ``name``, if any."""
    return Runner.objects.filter(name=name).first()


def forget_runner(name: str, boot_id: UUID) -> None:
    """Remove this boot's heartbeat row at a clean shutdown."""
    Runner.objects.filter(name=name, boot_id=boot_id).delete()


def requeue_orphans(timeout: float) -> list[tuple[UUID, str, str | None]]:
    """Requeue runs held by runners whose heartbeat is older than ``timeout`` seconds.

    Returns ``(run id, workflow name, dead runner)`` for each requeued run. The heartbeat
    age is checked again inside the UPDATE itself, so a runner that came back under the
    same name a moment ago keeps the runs it has just reclaimed.
    """
    cutoff = timezone.now() - timedelta(seconds=timeout)
    dead = Runner.objects.filter(last_seen__lt=cutoff).values("name")
    with transaction.atomic():
        orphans = list(
            Workflow.objects.filter(status=Status.RUNNING, claimed_by__in=dead).values_list(
                "id", "name", "claimed_by"
            )
        )
        if not orphans:
            return []
        requeued = Workflow.objects.filter(
            id__in=[row[0] for row in orphans], status=Status.RUNNING, claimed_by__in=dead
        ).update(
            status=Status.SCHEDULED, claimed_by=None, claim_token=None, updated_at=timezone.now()
        )
        notify_due()
    return orphans if requeued else []


# Operations: the queries behind everystep_runs, everystep_show and everystep_prune.
# ``cutoff`` values are aware datetimes, like the ``started_at`` arguments above.


def list_runners() -> list[Runner]:
    """Every runner heartbeat row, by name."""
    return list(Runner.objects.order_by("name"))


def held_runs() -> dict[str, int]:
    """How many ``running`` runs each runner name holds, in one aggregate query (names
    without a heartbeat row included: their runs wait for orphan recovery)."""
    rows = (
        Workflow.objects.filter(status=Status.RUNNING, claimed_by__isnull=False)
        .order_by()
        .values_list("claimed_by")
        .annotate(n=Count("id"))
    )
    return {name: n for name, n in rows}
