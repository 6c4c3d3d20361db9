"""The everystep-runner container entrypoint.

Container-only code, shipped in the image and not in the ``everystep`` wheel: the runner's
settings (TOML file, ``EVERYSTEP_*`` environment, command-line flags), loading the user's
Django project, and the roles the entrypoint runs (worker, UI, demo, config check):

- ``cli``: the entrypoint: runner flags, then a role or a management command (``__main__``
  runs it for ``python -m everystep_runner``);
- ``settings``: the runner's settings, one name across TOML, environment and flags;
- ``dburl``: database URLs to a Django ``DATABASES`` entry, and masking them;
- ``project``: loading the user's Django project at run time;
- ``sqlite_files``: a SQLite database in a volume: one line when it cannot be written;
- ``ui`` and ``urls``: the ``ui`` role (gunicorn serving the UI, the admin login, metrics);
- ``probe_listener``: the ``ui`` role's probes, answered without a thread per connection;
- ``demo``: the ``demo`` role and its bundled example project (``demo/orders``).
"""

# Equal to ``everystep.__version__``: the runner and the library are released together
# (tests/unit/test_version.py).
__version__ = "0.1.0"
