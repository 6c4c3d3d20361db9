"""System checks for everystep's settings (``manage.py check`` reports them)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from everystep import conf, options


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    value = conf.get("EVERYSTEP_FORK_THREADS")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        errors.append(
            checks.Error(
                f"EVERYSTEP_FORK_THREADS must be a positive integer, got {value!r}",
                id="everystep.E001",
            )
        )
    value = conf.get("EVERYSTEP_MAX_RECOVERIES")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        errors.append(
            checks.Error(
                f"EVERYSTEP_MAX_RECOVERIES must be an integer >= 0 (0 = no limit), got {value!r}",
                id="everystep.E004",
            )
        )
    # The worker's settings are validated by the very rules Worker applies, so a value
    # that passes here is one a worker accepts.
    try:
        conf.worker_options()
    except options.OptionError as exc:
        errors += [checks.Error(problem, id="everystep.E003") for problem in exc.problems]
    return errors
