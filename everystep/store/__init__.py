"""Every query and update the engine, the worker, the commands and the UI make; nothing
outside this package builds a queryset of its own. Callers import from the module that
does the work (``from everystep.store.runs import get_run``): there is no facade to map.

The connection and the machinery:

- ``database``: everystep's alias (``EVERYSTEP_DATABASE``): its connection, its transactions;
- ``sql``: the hot-path statements' machinery, per database;
- ``prepared``: whether the hot-path statements are prepared on the server (PostgreSQL);
- ``guard``: what a failing database means to the engine's store calls
  (``guarded``, ``DATABASE_ERRORS``, ``UNREACHABLE``);
- ``network``: how long a silent connection may stay silent before it counts as gone
  (keepalives, ``TCP_USER_TIMEOUT``);
- ``wake``: NOTIFY when a run becomes due or an awaited run ends, LISTEN in idle workers
  and waiters (PostgreSQL).

A run's life, in the order it meets them:

- ``runs``: scheduling, the engine's reads of a run, operators' writes to one run;
- ``claims``: claiming due runs, per database;
- ``step_records``: a claimed run's records (steps, waits, patch decisions, child starts;
  concluding a wait also drops its ``RunWait`` rows), fenced by the claim;
- ``outcome``: the fenced writes that end a claimed pass (its outcome, its release to wait,
  its requeue). These two modules hold every write made for a claimed run;
- ``events``: events sent to runs;
- ``run_waits``: runs waiting for other runs to end (``result``, ``gather``);
- ``published``: the values runs publish, written and read back;
- ``runners``: heartbeats and requeueing the runs of runners that are gone;
- ``carrying``: due runs that wait for a worker on other code;
- ``forks``: writing a fork (the new run and the copies of its original's records);
- ``timeshift``: moving pending times earlier, for ``everystep.testing.run_due(advance=…)``;
- ``task_attempts``: the attempts of a Django ``@task``'s run.

What operators read and do:

- ``reports``: read-only queries (operators, metrics, health, UI);
- ``prune``: deleting old finished runs, batch by batch;
- ``step_pages``: the steps of one run as the run page pages them;
- ``lineage``: a run's forks, the run it was forked from and the runs forked from it;
- ``bulk``: bulk cancel and requeue by filter, and the batches bulk fork walks;
- ``audit``: the audit trail of operators' actions;
- ``replay_check``: the batches of unfinished runs the replay check reads, read-only.

The status transitions themselves, and the fencing rule, are on the model layer
(``everystep.models.WorkflowQuerySet``).
"""
