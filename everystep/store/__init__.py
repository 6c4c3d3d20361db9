"""Every query and update the engine, the worker, the commands and the UI make; nothing
outside this package builds a queryset of its own.

- ``runs``: scheduling, and the engine's reads and fenced writes for a claimed run;
- ``runners``: heartbeats and requeueing the runs of runners that are gone;
- ``reports``: read-only queries (operators, metrics, health, UI) and pruning.

Claims, the per-database part, are in ``everystep.claim``.
"""

from everystep.store.reports import (
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
    cancel_run,
    create_run,
    finish_run,
    get_run,
    load_steps,
    record_step,
    requeue_one,
    requeue_run,
    resolve_step,
)

__all__ = [
    "beat",
    "cancel_run",
    "create_run",
    "finish_run",
    "forget_runner",
    "get_run",
    "get_runner",
    "held_runs",
    "list_runners",
    "list_runs",
    "load_steps",
    "ping",
    "prunable_counts",
    "prunable_sample",
    "prune_batch",
    "queue_stats",
    "record_step",
    "requeue_one",
    "requeue_orphans",
    "requeue_run",
    "requeue_runner",
    "resolve_step",
    "run_steps",
    "status_counts",
    "unapplied_migrations",
]
