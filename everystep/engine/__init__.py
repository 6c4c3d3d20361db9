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

- ``steps``: a step call;
- ``parallel``: ``parallel()``, branches in their own id scopes;
- ``waits``: ``sleep``, ``sleep_until``, ``wait_for``, and the one durable wait;
- ``results``: ``result()`` and ``gather()``, waiting for runs to end;
- ``children``: ``start()`` inside a body;
- ``patches``: ``patched()`` and ``deprecate_patch()``.

Replaying outside a worker:

- ``check``: the replay check of unfinished runs against the code installed now;
- ``fork``: ``everystep.fork``, a finished run re-run from a step;
- ``bulk_fork``: fork every finished run a filter matches.
"""
