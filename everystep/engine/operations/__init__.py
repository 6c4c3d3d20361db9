"""What a body calls, each a kind of recorded operation (``everystep.engine.core``'s
one path):

- ``step_run``: a step executed, or served from its record;
- ``parallel``: ``parallel()``, branches in their own id scopes;
- ``waits``: ``sleep``, ``sleep_until``, ``wait_for``, and the one durable wait;
- ``results``: ``result()`` and ``gather()`` in a body, waiting for runs to end;
- ``children``: ``start()`` inside a body;
- ``patches``: ``patched()`` and ``deprecate_patch()``;
- ``progress``: ``publish()``, from a body or a step (not recorded: a value the run
  shows).
"""
