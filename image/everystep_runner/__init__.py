"""The everystep-runner container entrypoint.

Container-only code, shipped in the image and not in the ``everystep`` wheel: the runner's
settings (TOML file, ``EVERYSTEP_*`` environment, command-line flags), loading the user's
Django project, and the roles the entrypoint runs (worker, UI, demo, config check).
"""
