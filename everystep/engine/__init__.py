"""The engine: what a workflow body's calls do while a worker replays it. Waiting from
outside a run (``everystep.waiting``), the operators' replays (``everystep.replays``),
everystep's own workflows (``everystep.builtins``) and Django's task framework sit above
it, and the engine reaches them only through the registry (``registry.definition``,
``WorkflowDef``'s hooks).

Three rooms by job, each importing only from the rooms below it
(``tests/unit/test_layers.py``), and the two entries on top:

- ``core/``: the core of a pass: its state, the replay decision, the one path of every
  recorded operation, how the pass ends;
- ``operations/``: what a body calls, each a kind of recorded operation (steps, sleeps
  and waits, waits for runs, child starts, patch decisions) and ``publish``;
- ``asynchronous/``: the machinery of ``async def`` bodies: the replay on an event loop,
  the awaitable operations, sync work on a thread;
- ``execute``: one pass over a claimed run: replay the body, sync or async, executing
  what is new, until it returns or stops;
- ``steps``: a ``@step`` call: executed or served in a sync body, its awaitable in an
  async one (so it sits above both rooms).
"""
