"""The engine: what a workflow body's calls do while a worker replays it. Waiting from
outside a run (``everystep.waiting``), the operators' replays (``everystep.replays``),
everystep's own workflows (``everystep.builtins``) and Django's task framework sit above
it, and the engine reaches them only through the registry (``registry.definition``,
``WorkflowDef``'s hooks).

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
- ``results``: ``result()`` and ``gather()`` in a body, waiting for runs to end;
- ``children``: ``start()`` inside a body;
- ``patches``: ``patched()`` and ``deprecate_patch()``;
- ``progress``: ``publish()``, from a body or a step.

Async bodies:

- ``async_body``: the replay on an event loop, a scope per task;
- ``async_ops``: the awaitable waits and starts, ids taken at the call;
- ``async_steps``: a step awaited;
- ``offload``: sync work on a thread from async code, and the release of a request
  thread's idle connections before a long wait.
"""
