"""The long-running worker: claims due runs and executes them on a thread pool.

- ``loop``: ``Worker`` — its lifecycle and the claim loop (backlog, gathering, strays).
- ``supervisor``: the claim loop on a thread of its own, while the main thread handles
  signals and bounds the shutdown.
- ``passes``: a run's pass on the pool — submitted, executed, reaped (retried after an
  outage, failed when it crashed outside the engine); ``event_loop``: the one loop the
  passes of ``async def`` runs share.
- ``worker_state``: ``WorkerOptions`` and ``WorkerState``, the narrow object the
  collaborators below read instead of the ``Worker`` class.
- ``shutdown``: the drain; ``interrupts``: SIGTERM/SIGINT handling.
- ``heartbeat``: on a thread of its own, the runner's beats, orphan recovery and the sweep
  for waiters left asleep; ``naming``: taking the runner name at start-up (one live
  process per name); ``outage``: the backoff and logs while the database is away;
  ``carrying``: what this worker can carry on, and the runs that wait for other code;
  ``reload``: ``--reload``, a restart on a change to the project's code, for development.
- ``processes``: ``--processes N``, a supervisor of N worker processes, one worker to the
  outside; ``forking``: the two sides of its fork; ``merged``: its one HTTP port, from
  the children's.
- ``health`` (liveness and readiness), ``collector`` (the worker's gauges) and ``http``
  (the port serving both); ``connections``: database connections kept across runs.
"""

from everystep.worker.loop import Worker

__all__ = ["Worker"]
