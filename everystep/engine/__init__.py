"""The engine: what a workflow body's calls do while a worker replays it, and the
operations that replay a body outside a worker (fork, the replay check).

One pass over a claimed run:

- ``execute``: one pass: replay the body, executing what is new, until it returns or stops;
- ``outcome``: how the pass then ends (finish, wait, requeue, abandon), written fenced;
- ``pass_state``: the pass's state only: the run being replayed, id scopes, the frame;
- ``replay``: the replay decision for one recorded operation, a pure function;
- ``recorded``: the one path every recorded operation takes (reach its id, decide, then
  record, serve or conclude), and the records' writes;
- ``crashes``: simulated crashes at a chosen point, for tests.

What a body calls, each a kind of recorded operation:

- ``steps``: a step call; ``step_run``: a step executed, or served from its record;
- ``parallel``: ``parallel()``, branches in their own id scopes;
- ``waits``: ``sleep``, ``sleep_until``, ``wait_for``, and the one durable wait;
- ``results``: ``result()`` and ``gather()``, waiting for runs to end;
- ``children``: ``start()`` inside a body;
- ``patches``: ``patched()`` and ``deprecate_patch()``;
- ``progress``: ``publish()``, from a body or a step.

Async bodies:

- ``async_body``: the replay on an event loop, a scope per task;
- ``async_ops``: the awaitable waits and starts, ids taken at the call;
- ``async_steps``: a step awaited;
- ``offload``: sync work on a thread from async code, and the release of a request
  thread's idle connections before a long wait.

Waiting from outside a run (a view, a script):

- ``waiters``: ``aresult``, ``agather`` and ``awatch`` on an event loop;
- ``hub``: the one thread per process that reads and wakes for every such waiter;
- ``watching``: ``published()`` and ``watch()``, a run's published values.

Replaying outside a worker:

- ``check``: the replay check of unfinished runs against the code installed now;
- ``fork``: ``everystep.fork``, a finished run re-run from a step;
- ``bulk_fork``: fork every finished run a filter matches;
- ``bulk_run``: ``everystep.bulk_action``, the built-in workflow that takes a UI bulk
  action batch by batch.

Django's task framework:

- ``task_runs``: a ``@task`` run's name resolved to its Task, the task as the run's
  body, and the run read back as a ``TaskResult``.
"""
