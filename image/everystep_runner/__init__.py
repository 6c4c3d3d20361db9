"""The everystep-runner container entrypoint.

Container-only code, shipped in the image and not in the ``everystep`` wheel: the runner's
settings (TOML file, ``EVERYSTEP_*`` environment, command-line flags), loading the user's
Django project, and the roles the entrypoint runs (worker, UI, demo, config check).
"""

# Equal to ``everystep.__version__``: the runner and the library are released together
# (tests/unit/test_version.py).
__version__ = "0.1.0"
