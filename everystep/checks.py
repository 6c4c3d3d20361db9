"""System checks for everystep's settings (``manage.py check`` reports them)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from everystep import conf


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
    return errors
