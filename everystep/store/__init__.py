"""Every query and update the engine, the worker, the commands and the UI make; nothing
outside this package builds a queryset of its own.

- ``claims``: claiming due runs and the fenced step record, per database;
- ``wake``: NOTIFY when a run becomes due, LISTEN in idle workers (PostgreSQL);
- ``runs``: scheduling, and the engine's reads and fenced writes for a claimed run;
- ``waits``: releasing a run until it is due (sleeps, waits), and events sent to runs;
- ``runners``: heartbeats and requeueing the runs of runners that are gone;
- ``reports``: read-only queries (operators, metrics, health, UI) and pruning;
- ``replay_check``: the batches of unfinished runs the replay check reads, read-only.

The status transitions themselves, and the fencing rule, are on the model layer
(``everystep.models.WorkflowQuerySet``).
"""

from django.db import DatabaseError, InterfaceError

from everystep.errors import StoreUnavailable
from everystep.store.claims import claim_due, next_due, reclaim_parked, reclaim_strays
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
from everystep.store.runners import (
    beat,
    forget_runner,
    get_runner,
    held_runs,
    list_runners,
    requeue_orphans,
    requeue_runner,
)
from everystep.store.runs import (
    SETTLE_MODES,
    cancel_run,
    create_run,
    fenced_transaction,
    finish_run,
    get_run,
    load_steps,
    record_step,
    requeue_one,
    requeue_run,
    resolve_step,
    settle_step,
)
from everystep.store.timeshift import shift_pending
from everystep.store.waits import (
    check_event_name,
    event_payload,
    send_event,
    settle_wait,
    suspend_run,
    waiting_count,
)
from everystep.store.wake import Listener, can_listen, notify_due

# What a database outage raises through Django: ``InterfaceError`` (a connection closed
# under the driver) is not a ``DatabaseError``, and must not end a worker's loop either.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)
# The same, as the engine's store calls report it.
UNREACHABLE: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, StoreUnavailable)

__all__ = [
    "CHECKED_STATUSES",
    "COUNT_CAP",
    "DATABASE_ERRORS",
    "SETTLE_MODES",
    "UNREACHABLE",
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
    "next_due",
    "notify_due",
    "ping",
    "prunable_counts",
    "prunable_sample",
    "prune_batch",
    "queue_stats",
    "read_only",
    "reclaim_parked",
    "reclaim_strays",
    "record_step",
    "requeue_one",
    "requeue_orphans",
    "requeue_run",
    "requeue_runner",
    "resolve_step",
    "run_steps",
    "send_event",
    "settle_step",
    "settle_wait",
    "shift_pending",
    "status_counts",
    "suspend_run",
    "unapplied_migrations",
    "unfinished_batch",
    "waiting_count",
]
