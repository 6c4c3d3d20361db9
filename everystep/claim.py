"""Claiming due runs: the one place that knows how each database does it.

- PostgreSQL, and MariaDB ≥ 10.6 / MySQL ≥ 8: ``SELECT … FOR UPDATE SKIP LOCKED`` in a
  short transaction, so concurrent workers never wait on each other's batches.
- Older MariaDB/MySQL: plain ``FOR UPDATE``; claims stay exclusive but serialise.
- SQLite: no row locks at all, so the claim is a single ``UPDATE … WHERE id IN (SELECT …
  LIMIT n)`` statement; SQLite runs it under its database write lock, which makes it
  exclusive across processes.

Each claim gets a fresh token (see ``store`` on fencing).

On PostgreSQL, scheduling and requeueing also ``NOTIFY`` (delivered at commit, so a
rolled-back schedule wakes nobody) and idle workers ``LISTEN``; elsewhere workers poll.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from django.db import connection, transaction
from django.db.models import DateTimeField, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from everystep import conf
from everystep.engine.state import Claim
from everystep.models import Status, Workflow


def claim_due(runner: str, limit: int) -> list[Claim]:
    """Claim up to ``limit`` scheduled runs for ``runner``, oldest first."""
    if limit <= 0:
        return []
    token = uuid.uuid4()
    if connection.vendor == "sqlite":
        due = Workflow.objects.filter(status=Status.SCHEDULED).order_by("id").values("id")
        _take(Workflow.objects.filter(id__in=due[:limit], status=Status.SCHEDULED), runner, token)
    else:
        with transaction.atomic():
            locked = Workflow.objects.filter(status=Status.SCHEDULED).order_by("id")
            skip = connection.features.has_select_for_update_skip_locked
            locked = locked.select_for_update(skip_locked=skip)
            ids = list(locked.values_list("id", flat=True)[:limit])
            if ids:
                _take(Workflow.objects.filter(id__in=ids), runner, token)
    return _claims_with(runner, token)


def reclaim_parked(runner: str) -> list[Claim]:
    """Startup catchup: take a fresh claim on every run left ``running`` under ``runner``
    by a previous process of the same name, so its late writes (if it is somehow still
    alive) are fenced out."""
    token = uuid.uuid4()
    Workflow.objects.filter(status=Status.RUNNING, claimed_by=runner).update(
        claim_token=token, updated_at=timezone.now()
    )
    return _claims_with(runner, token)


def _take(queryset: object, runner: str, token: uuid.UUID) -> None:
    now = timezone.now()
    queryset.update(  # type: ignore[attr-defined]
        status=Status.RUNNING,
        claimed_by=runner,
        claim_token=token,
        updated_at=now,
        started_at=Coalesce("started_at", Value(now, output_field=DateTimeField())),
    )


def _claims_with(runner: str, token: uuid.UUID) -> list[Claim]:
    ids = (
        Workflow.objects.filter(claimed_by=runner, status=Status.RUNNING, claim_token=token)
        .order_by("id")
        .values_list("id", flat=True)
    )
    return [Claim(run_id=run_id, token=token, runner=runner) for run_id in ids]


CHANNEL = "everystep_due"
logger = logging.getLogger("everystep.worker")


def notify_due() -> None:
    """Tell listening workers that a run became due (PostgreSQL, when enabled)."""
    if connection.vendor == "postgresql" and conf.notify():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


def can_listen() -> bool:
    return connection.vendor == "postgresql"


# Connection parameters Django adds for its own cursors that libpq does not know.
_DJANGO_ONLY = {
    "context",
    "cursor_factory",
    "prepare_threshold",
    "server_side_binding",
    "pool",
    "isolation_level",
    "assume_role",
}


class Listener(threading.Thread):
    """LISTEN on a dedicated PostgreSQL connection and set ``wake`` on every
    notification, until ``stop`` is set. Reconnects with backoff if the database goes
    away; the claim loop keeps polling meanwhile."""

    def __init__(self, wake: threading.Event, stop: threading.Event) -> None:
        super().__init__(name="everystep-listener", daemon=True)
        self.wake = wake
        self.stop_event = stop
        params: dict[str, Any] = connection.get_connection_params()
        self.params = {k: v for k, v in params.items() if k not in _DJANGO_ONLY}

    def run(self) -> None:
        import psycopg

        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with psycopg.connect(**self.params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    backoff = 0.5
                    # A notification may have been missed while (re)connecting.
                    self.wake.set()
                    while not self.stop_event.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self.wake.set()
            except psycopg.Error as exc:
                logger.warning(
                    "LISTEN connection lost (%s); polling until it is back",
                    exc,
                    extra={"event": "worker.listen_lost"},
                )
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
