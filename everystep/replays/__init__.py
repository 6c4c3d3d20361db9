"""Replaying a body outside a worker, for an operator, above the engine (whose pass they
replay with ``everystep.engine.execute.replay_here``):

- ``check``: the replay check of unfinished runs against the code installed now;
- ``fork``: ``everystep.fork``, a finished run re-run from a step;
- ``bulk_fork``: fork every finished run a filter matches.
"""
