"""Read-only queries for operators, metrics, health and the UI (pruning: ``prune``).

``cutoff`` arguments are aware datetimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any
from uuid import UUID

from django.db.models import Count
from django.utils import timezone

from everystep.models import Status, Step, Workflow, WorkflowQuerySet
from everystep.store import database
from everystep.store.events import waiting_count
from everystep.times import aware


def queue_stats() -> dict[str, Any]:
    """Counts of pending (due), waiting (sleeping, waiting for an event or for other
    runs to end, not started yet), running and blocked runs, and how long the
    longest-due run has waited."""
    now = timezone.now()
    rows = (
        Workflow.objects.filter(status__in=[Status.SCHEDULED, Status.RUNNING, Status.BLOCKED])
        .values("status")
        .annotate(n=Count("id"))
    )
    counts = {row["status"]: row["n"] for row in rows}
    waiting = waiting_count()
    # The claim index (status, due_at, id) serves this.
    oldest = (
        Workflow.objects.filter(status=Status.SCHEDULED, due_at__lte=now)
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )
    age = (now - oldest).total_seconds() if oldest is not None else 0.0
    return {
        # Two reads: never report a negative count if a run woke in between.
        "pending": max(counts.get(Status.SCHEDULED, 0) - waiting, 0),
        "waiting": waiting,
        "running": counts.get(Status.RUNNING, 0),
        "blocked": counts.get(Status.BLOCKED, 0),
        "oldest_pending_age": max(age, 0.0),
    }


def ping() -> None:
    """Raise if the database cannot be reached."""
    with database.connection().cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def unapplied_migrations() -> list[str]:
    """Migrations of every app that the database does not have yet."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(database.connection())
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


# A run's JSON columns, left out of every listing: each can be megabytes.
_PAYLOADS = ("args", "result", "error")


def list_runs(
    *,
    status: str | None = None,
    name: str | None = None,
    runner: str | None = None,
    parent: UUID | None = None,
    queue: str | None = None,
    limit: int,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    search: str | None = None,
    older_than: UUID | None = None,
    newer_than: UUID | None = None,
) -> list[Workflow]:
    """The most recent runs, newest first, without their (possibly large) JSON payloads.

    ``parent`` keeps the runs that run's body started (its children); ``queue`` the
    runs of Django tasks enqueued on that queue.
    ``created_after`` (inclusive) and ``created_before`` (exclusive) bound the creation
    time; ``search`` keeps the runs it finds (see ``search_parts``). Keyset paging:
    ``older_than`` gives the ``limit`` runs just below that id, ``newer_than`` the
    ``limit`` runs just above it (still newest first), so a page never shifts when new
    runs arrive meanwhile.
    """
    runs = filtered_runs(status=status, name=name, runner=runner, parent=parent, queue=queue).defer(
        *_PAYLOADS
    )
    runs = runs.filter(**id_bounds(created_after, created_before, older_than, newer_than))
    upward = newer_than is not None and older_than is None
    parts = [runs] if search is None else search_parts(runs, search)
    # One query per part (the id range, the key), each on its own index, rather than an
    # OR that could lead a planner to walk the primary key backwards through every row.
    found = {run.id: run for part in parts for run in _nearest(part, limit, upward)}
    if search is not None:
        found = {run_id: run for run_id, run in found.items() if _found_by(run, search)}
    nearest = sorted(found.values(), key=attrgetter("id"), reverse=not upward)[:limit]
    return nearest[::-1] if upward else nearest


def filtered_runs(
    *,
    status: str | None = None,
    name: str | None = None,
    runner: str | None = None,
    parent: UUID | None = None,
    queue: str | None = None,
) -> WorkflowQuerySet:
    """The runs the runs list's filters keep (bulk actions use the same ones)."""
    runs: WorkflowQuerySet = Workflow.objects.all()
    if status is not None:
        runs = runs.filter(status=status)
    if name is not None:
        runs = runs.filter(name=name)
    if runner is not None:
        runs = runs.filter(claimed_by=runner)
    if parent is not None:
        # Served by the foreign key's index on parent_id.
        runs = runs.filter(parent_id=parent)
    if queue is not None:
        # No index of its own: it narrows the other filters' rows, or walks the runs
        # newest first until a page is found.
        runs = runs.filter(queue=queue)
    return runs


def _nearest(runs: Any, limit: int, upward: bool) -> list[Workflow]:
    # Ids are UUIDv7, so the primary key (or the status/name indexes ending in id) gives
    # creation order without sorting on created_at.
    return list(runs.order_by("id" if upward else "-id")[:limit])


# Run ids are UUIDv7: their first 48 bits are the creation time in milliseconds, so a
# time window is an id range, served by the primary key and every index ending in id.
_MS_BITS = 48
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def first_id_at(moment: datetime) -> UUID:
    """The smallest run id made at or after ``moment`` (naive: in the current time zone),
    clamped to the ids' range of times."""
    ms = (aware(moment) - _EPOCH) // timedelta(milliseconds=1)
    return UUID(int=max(0, min(ms, (1 << _MS_BITS) - 1)) << (128 - _MS_BITS))


def id_bounds(
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    older_than: UUID | None = None,
    newer_than: UUID | None = None,
) -> dict[str, UUID]:
    """Lookups bounding the run id by creation time and by paging cursors."""
    lows = [first_id_at(created_after)] if created_after is not None else []
    highs = [first_id_at(created_before)] if created_before is not None else []
    bounds = {}
    if newer_than is not None:
        bounds["id__gt"] = newer_than
    if older_than is not None:
        highs.append(older_than)
    if lows:
        bounds["id__gte"] = max(lows)
    if highs:
        bounds["id__lt"] = min(highs)
    return bounds


# The search box: a full run id, an id prefix of at least this many hex digits, or an
# idempotency key (exact).
ID_PREFIX_MIN = 8
_HEX = frozenset("0123456789abcdef")


def id_digits(text: str) -> str | None:
    """``text`` as the hex digits of a run id or id prefix (dashes and case ignored), or
    None if it cannot be one."""
    digits = text.replace("-", "").lower()
    if ID_PREFIX_MIN <= len(digits) <= 32 and set(digits) <= _HEX:
        return digits
    return None


def id_prefix_range(digits: str) -> tuple[UUID, UUID | None]:
    """The ids starting with hex ``digits``: ``[low, high)``, ``high`` None at the top."""
    shift = 4 * (32 - len(digits))
    low = int(digits, 16) << shift
    high = low + (1 << shift)
    return UUID(int=low), (UUID(int=high) if high < 1 << 128 else None)


@dataclass(frozen=True)
class PrefixMatch:
    """The runs whose id starts with some hex digits: the first few (``runs``, oldest
    first) and how many there are (``count``)."""

    runs: list[Workflow]
    count: int


def runs_by_id_prefix(digits: str, shown: int) -> PrefixMatch:
    """The runs whose id starts with hex ``digits`` (see ``id_digits``): the first
    ``shown`` (id, name and status only) and their count, by a range on the primary key."""
    low, high = id_prefix_range(digits)
    in_range = Workflow.objects.filter(id__gte=low, **({} if high is None else {"id__lt": high}))
    first = list(in_range.only("id", "name", "status").order_by("id")[: shown + 1])
    # Checked row by row, as the search does (``_found_by``: MariaDB's UUID order).
    runs = [run for run in first if run.id.hex.startswith(digits)]
    # Counted only when there are more than shown, on the same primary-key range.
    count = len(runs) if len(first) <= shown else in_range.count()
    return PrefixMatch(runs[:shown], count)


def search_parts(runs: Any, text: str) -> list[Any]:
    """``runs`` narrowed to what ``text`` finds, as querysets to union: runs whose id is
    or starts with ``text`` (a range on the primary key, never LIKE on a cast), and
    runs whose idempotency key is ``text``."""
    parts = [runs.filter(idempotency_key=text)]
    digits = id_digits(text)
    if digits is not None:
        low, high = id_prefix_range(digits)
        parts.append(runs.filter(id__gte=low, **({} if high is None else {"id__lt": high})))
    return parts


def _found_by(run: Workflow, text: str) -> bool:
    # MariaDB's native UUID type stores version 1-5 UUIDs with their time fields swapped
    # and compares them so: a prefix range bounded by such values can take in ids outside
    # the prefix. Checking the rows fetched keeps the answer exact everywhere.
    digits = id_digits(text)
    return run.idempotency_key == text or (digits is not None and run.id.hex.startswith(digits))


@dataclass(frozen=True)
class WaitReport:
    """Why a scheduled run is not due yet: ``kind`` is ``start`` (a delayed start, never
    claimed yet), ``sleep``, or ``event`` (awaiting ``events``, the run's ``waiting_for``
    text); ``until`` is when it becomes due anyway (None: only an event wakes it)."""

    kind: str
    until: datetime | None
    events: str = ""


def run_wait(run: Workflow, now: datetime | None = None) -> WaitReport | None:
    """What ``run`` waits for, or None if it is not a scheduled run waiting (it is due,
    running or finished). Reads the row's fields only: no query."""
    if run.status != Status.SCHEDULED:
        return None
    if run.due_at is not None and run.due_at <= (now or timezone.now()):
        return None
    if run.waiting_for or run.due_at is None:
        return WaitReport("event", run.due_at, run.waiting_for or "")
    # A run is claimed before it can sleep, and its first claim sets started_at.
    return WaitReport("start" if run.started_at is None else "sleep", run.due_at)


def run_steps(run_id: UUID | str) -> list[Step]:
    """Every recorded step of a run, in the order they started."""
    return list(Step.objects.filter(workflow_id=run_id).order_by("started_at", "step_id"))


# The UI's read-only queries (everystep.ui.views); list_runs and run_steps above serve it
# too, and get_run from store.runs.


COUNT_CAP = 10_000


def status_counts(
    *,
    name: str | None = None,
    runner: str | None = None,
    parent: UUID | None = None,
    queue: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    cap: int = COUNT_CAP,
) -> dict[str, int]:
    """How many runs there are in each status (every status listed, zeros included); only
    runs of workflow ``name``, held by ``runner``, started by run ``parent``, created in
    the window, if given.

    Counting stops at ``cap + 1`` per status (a value above ``cap`` means "more than
    ``cap``"): each status is counted over at most that many entries of its index
    (``status, id``, with the time window as an id range; ``name, status, id`` for a
    workflow; ``claimed_by, status, name`` for a runner), so the runs page costs the same
    with a million finished runs as with a thousand.
    """
    runs = filtered_runs(name=name, runner=runner, parent=parent, queue=queue)
    runs = runs.filter(**id_bounds(created_after, created_before))
    return {status: _capped_count(runs.filter(status=status), cap) for status in Status.values}


def _capped_count(runs: WorkflowQuerySet, cap: int | None) -> int:
    # Counted over at most ``cap + 1`` index entries: a value above ``cap`` means "more".
    if cap is None:
        return runs.count()
    return runs.order_by().values("id")[: cap + 1].count()


@dataclass(frozen=True)
class Family:
    """A run's parent (None: it has none, or the parent is gone) and its first children
    in the order they were started, without their JSON payloads, and how many children
    it has (above the cap asked for: more than the cap)."""

    parent: Workflow | None
    children: list[Workflow]
    child_count: int


def run_family(
    run: Workflow, limit: int, cap: int | None = COUNT_CAP, *, children: bool = True
) -> Family:
    """``run``'s parent and its first ``limit`` children; the children counted up to
    ``cap + 1`` (None: exactly). ``children=False``: the caller knows there are none
    (the run recorded no start), and nothing is read for them. No statement at all for
    a run with neither."""
    parent = None
    if run.parent_id is not None:
        parent = Workflow.objects.defer(*_PAYLOADS).filter(id=run.parent_id).first()
    if not children:
        return Family(parent, [], 0)
    started = filtered_runs(parent=run.id)
    first = list(started.defer(*_PAYLOADS).order_by("id")[:limit])
    # Fewer than asked for: that is all of them, no second statement.
    count = len(first) if len(first) < limit else _capped_count(started, cap)
    return Family(parent, first, count)
