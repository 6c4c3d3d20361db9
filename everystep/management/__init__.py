"""everystep's management commands (``commands/``: one module per ``manage.py everystep_*``
command, ``_base`` for what they all share) and ``arguments``: the argument checks and the
bulk actions' filter flags they share. The commands are thin: each parses and checks its
arguments and calls the store, the engine or ``everystep.worker.Worker``."""
