"""Runner heartbeats and requeueing the runs of runners that are gone."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import IntegrityError
from django.db.models import Count, F
from django.utils import timezone

from everystep import conf
from everystep.models import Runner, Status, Workflow
from everystep.store import audit, database
from everystep.store.audit import Actor
from everystep.store.wake import notify_due
from everystep.values import Carrying


def requeue_runner(name: str, *, actor: Actor | None = None, reason: str = "") -> list[UUID]:
    """Put every run left ``running`` under runner ``name`` back to ``scheduled``. An
    ``actor`` (an operator, not a worker's own recovery) is audited in the requeue's
    transaction; a requeue that found nothing wrote nothing and leaves no entry."""

    def audited(ids: list[UUID]) -> None:
        if actor is not None:
            detail = {"runner": name}
            audit.record("requeue_runner", actor, run_ids=ids, reason=reason, detail=detail)

    return [run_id for run_id, _, _ in _requeue_held(audited, claimed_by=name)]


def beat(
    name: str, boot_id: UUID, *, pool_size: int, inflight: int, draining: bool, started_at: Any
) -> Runner | None:
    """Record that runner ``name`` (this boot of this process) is alive. Returns ``None``,
    or the row of another boot that holds the name now (``take_name`` gave the name away
    while this boot was silent): that row is left as it is."""
    state = {
        "pool_size": pool_size,
        "inflight": inflight,
        "draining": draining,
        "started_at": started_at,
    }
    # Write first, in autocommit: a read-then-write transaction on SQLite fails at once
    # ("database is locked") when another connection holds the write lock, instead of
    # waiting for it. Only this boot's row: overwriting another boot's would hide that
    # two processes beat under one name, each looking alive to the other.
    if Runner.objects.filter(name=name, boot_id=boot_id).update(**state, last_seen=timezone.now()):
        return None
    if take_name(name, boot_id, None, **state):
        return None  # the row was gone (removed by hand): this boot's again
    return get_runner(name)


def take_name(
    name: str,
    boot_id: UUID,
    replacing: Runner | None,
    *,
    pool_size: int,
    inflight: int,
    draining: bool,
    started_at: Any,
    heartbeat: float | None = None,
    carrying: Carrying | None = None,
) -> bool:
    """Make boot ``boot_id`` of this process the holder of runner name ``name`` (its row
    written as ``beat`` writes it): insert its row if there is none (``replacing`` is
    ``None``), or take over ``replacing``, the row as last read, only if its boot has not
    beaten since. One statement either way, so of processes racing for one name exactly
    one wins."""
    fields = {
        "boot_id": boot_id,
        "host": _host(),
        "pid": os.getpid(),
        "process_space": process_space(),
        "heartbeat": heartbeat,
        "code_version": None if carrying is None else carrying.code_version,
        "carries": None if carrying is None else list(carrying.names),
        "pool_size": pool_size,
        "inflight": inflight,
        "draining": draining,
        "started_at": started_at,
        "last_seen": timezone.now(),
    }
    if replacing is None:
        try:
            # A savepoint: the failed insert must not spoil a transaction around it.
            with database.atomic():
                Runner.objects.create(name=name, **fields)
        except IntegrityError:  # another process inserted it meanwhile
            return False
        return True
    # A boot's beats only move its ``last_seen`` forward (one process, one clock).
    stale = Runner.objects.filter(
        name=name, boot_id=replacing.boot_id, last_seen__lte=replacing.last_seen
    )
    return bool(stale.update(**fields))


@functools.cache
def _host() -> str:
    return socket.gethostname()


def is_this_host(row: Runner) -> bool:
    """Whether ``row``'s pid names a process of this process's own pid space: the same
    host name, kernel boot and pid namespace (Linux only; elsewhere never)."""
    space = process_space()
    return space is not None and row.host == _host() and row.process_space == space


@functools.cache
def process_space() -> str | None:
    """The kernel boot and the pid namespace this process runs in, or None where they
    cannot be read. Two processes with the same value see the same pids."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/pid:{namespace}"


def get_runner(name: str) -> Runner | None:
    """The heartbeat row of runner ``name``, if any."""
    return Runner.objects.filter(name=name).first()


def forget_runner(name: str, boot_id: UUID) -> None:
    """Remove this boot's heartbeat row at a clean shutdown."""
    Runner.objects.filter(name=name, boot_id=boot_id).delete()


def requeue_orphans(timeout: float) -> list[tuple[UUID, str, str | None]]:
    """Requeue runs held by runners whose heartbeat is older than ``timeout`` seconds.

    Returns ``(run id, workflow name, dead runner)`` for each requeued run. The heartbeat
    age is checked inside the marking UPDATE itself, so a runner that came back under the
    same name a moment ago keeps the runs it has just reclaimed.
    """
    cutoff = timezone.now() - timedelta(seconds=timeout)
    dead = Runner.objects.filter(last_seen__lt=cutoff).values("name")
    return _requeue_held(None, claimed_by__in=dead)


Requeued = list[tuple[UUID, str, str | None]]
# Called with the requeued ids inside the requeue's transaction, if any were.
Also = Callable[[list[UUID]], None] | None


def _requeue_held(also: Also, **held_by: Any) -> Requeued:
    """Requeue the ``running`` runs matching ``held_by``; returns what was requeued.

    A plain look comes first, in autocommit: the usual case (nothing to requeue, every
    few seconds in every worker) costs one statement and no transaction. Each taking is
    a recovery (see ``Workflow.recoveries``).
    """
    candidates = Workflow.objects.filter(status=Status.RUNNING, **held_by)
    if not candidates.exists():
        return []
    if database.connection().features.has_select_for_update_skip_locked:
        return _requeue_unlocked(candidates, also)
    return _mark_and_requeue(candidates, also)


def _requeue_unlocked(candidates: Any, also: Also) -> Requeued:
    """PostgreSQL, MariaDB: lock the candidates, skipping rows another transaction holds
    (another sweeper, perhaps paused mid-transaction: waiting behind it would stall this
    worker's heartbeat until live runners looked dead), then requeue exactly those."""
    of = {"of": ("self",)} if database.connection().features.has_select_for_update_of else {}
    with database.atomic():
        locked = candidates.select_for_update(skip_locked=True, **of)
        requeued = list(locked.values_list("id", "name", "claimed_by"))
        if requeued:
            taken = Workflow.objects.filter(id__in=[row[0] for row in requeued])
            taken.requeue(recoveries=F("recoveries") + 1)
            _then(also, requeued)
            notify_due()
    return requeued


def _mark_and_requeue(candidates: Any, also: Also) -> Requeued:
    """SQLite (no row locks): the transaction begins with a write, so it waits for the
    database lock instead of failing; the rows are marked with a fresh claim token, so the
    rows reported are exactly the rows requeued, and marking and requeueing commit
    together: no run is ever left running under a token nobody holds."""
    token = uuid.uuid4()
    with database.atomic():
        # Taking a run from a dead holder is a recovery (see Workflow.recoveries).
        if not candidates.update(claim_token=token, recoveries=F("recoveries") + 1):
            return []
        mine = Workflow.objects.filter(status=Status.RUNNING, claim_token=token)
        requeued = list(mine.values_list("id", "name", "claimed_by"))
        mine.requeue()
        _then(also, requeued)
        notify_due()
    return requeued


def _then(also: Also, requeued: Requeued) -> None:
    if also is not None and requeued:
        also([row[0] for row in requeued])


# For operators and the UI: which runners there are and what they hold.


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


def live_runners() -> Any:
    """The runners heard from too recently to be taken for dead (``Runner.may_be_alive``
    with the project's orphan timeout and heartbeat), as a query."""
    silent_for = max(conf.worker_default("orphan_timeout"), 2 * conf.worker_default("heartbeat"))
    return Runner.objects.filter(last_seen__gt=timezone.now() - timedelta(seconds=silent_for))


def live_runner_names() -> list[str]:
    """The names of ``live_runners``: their runs are theirs to finish."""
    return list(live_runners().values_list("name", flat=True))


def known_runner_names() -> list[str]:
    """Every runner name with a heartbeat row or a ``running`` run under it, sorted."""
    names = set(Runner.objects.values_list("name", flat=True))
    names.update(held_runs())
    return sorted(names)
