"""Every query and update the engine, the worker, the commands and the UI make; nothing
outside this package builds a queryset of its own.

- ``database``: everystep's alias (``EVERYSTEP_DATABASE``): its connection, its transactions;
- ``sql``: the hot-path statements' machinery, per database;
- ``claims``: claiming due runs, per database;
- ``fenced``: every write made for a claimed run (records, its outcome, releasing it);
- ``guard``: what a failing database means to the engine's store calls;
- ``wake``: NOTIFY when a run becomes due, LISTEN in idle workers (PostgreSQL);
- ``runs``: scheduling, the engine's reads of a run, operators' writes to runs;
- ``waits``: events sent to runs;
- ``awaits``: runs waiting for other runs to end (``result``, ``gather``);
- ``runners``: heartbeats and requeueing the runs of runners that are gone;
- ``reports``: read-only queries (operators, metrics, health, UI) and pruning;
- ``replay_check``: the batches of unfinished runs the replay check reads, read-only.

The status transitions themselves, and the fencing rule, are on the model layer
(``everystep.models.WorkflowQuerySet``).
"""

from django.db import DatabaseError, InterfaceError

from everystep.errors import StoreUnavailable
from everystep.store.claims import claim_due, next_due, reclaim_parked, reclaim_strays
from everystep.store.events import (
    check_event_name,
    event_payload,
    send_event,
    waiting_count,
)
from everystep.store.fenced import (
    Child,
    fenced_transaction,
    finish_run,
    merges_records,
    record_step,
    requeue_run,
    settle_started,
    step_values,
    suspend_run,
)
from everystep.store.replay_check import CHECKED_STATUSES, read_only, unfinished_batch
from everystep.store.reports import (
    COUNT_CAP,
    list_runs,
    ping,
    prunable_counts,
    prunable_sample,
    prune_batch,
    queue_stats,
    run_steps,
    status_counts,
    unapplied_migrations,
)
from everystep.store.run_waits import mark_awaited, outcomes, sweep
from everystep.store.run_waits import release as release_waits
from everystep.store.runners import (
    beat,
    forget_runner,
    get_runner,
    held_runs,
    list_runners,
    requeue_orphans,
    requeue_runner,
    take_name,
)
from everystep.store.runs import (
    SETTLE_MODES,
    cancel_run,
    create_run,
    get_run,
    load_steps,
    requeue_one,
    resolve_step,
    settle_step,
)
from everystep.store.timeshift import shift_pending
from everystep.store.wake import ENDED_CHANNEL, EndedListener, Listener, can_listen, notify_due

# What a database outage raises through Django: ``InterfaceError`` (a connection closed
# under the driver) is not a ``DatabaseError``, and must not end a worker's loop either.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)
# The same, as the engine's store calls report it.
UNREACHABLE: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, StoreUnavailable)

__all__ = [
    "CHECKED_STATUSES",
    "COUNT_CAP",
    "DATABASE_ERRORS",
    "ENDED_CHANNEL",
    "SETTLE_MODES",
    "UNREACHABLE",
    "Child",
    "EndedListener",
    "Listener",
    "beat",
    "can_listen",
    "cancel_run",
    "check_event_name",
    "claim_due",
    "create_run",
    "event_payload",
    "fenced_transaction",
    "finish_run",
    "forget_runner",
    "get_run",
    "get_runner",
    "held_runs",
    "list_runners",
    "list_runs",
    "load_steps",
    "mark_awaited",
    "merges_records",
    "next_due",
    "notify_due",
    "outcomes",
    "ping",
    "prunable_counts",
    "prunable_sample",
    "prune_batch",
    "queue_stats",
    "read_only",
    "reclaim_parked",
    "reclaim_strays",
    "record_step",
    "release_waits",
    "requeue_one",
    "requeue_orphans",
    "requeue_run",
    "requeue_runner",
    "resolve_step",
    "run_steps",
    "send_event",
    "settle_started",
    "settle_step",
    "shift_pending",
    "status_counts",
    "step_values",
    "suspend_run",
    "sweep",
    "take_name",
    "unapplied_migrations",
    "unfinished_batch",
    "waiting_count",
]
