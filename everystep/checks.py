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
    if not isinstance(conf.get("EVERYSTEP_NOTIFY"), bool):
        errors.append(checks.Error("EVERYSTEP_NOTIFY must be True or False", id="everystep.E002"))
    for name in ("EVERYSTEP_HEARTBEAT", "EVERYSTEP_ORPHAN_TIMEOUT"):
        value = conf.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            errors.append(
                checks.Error(
                    f"{name} must be a number of seconds >= 0, got {value!r}", id="everystep.E003"
                )
            )
    heartbeat, orphan = conf.get("EVERYSTEP_HEARTBEAT"), conf.get("EVERYSTEP_ORPHAN_TIMEOUT")
    if (
        isinstance(heartbeat, int | float)
        and isinstance(orphan, int | float)
        and 0 < orphan <= 2 * heartbeat
    ):
        errors.append(
            checks.Error(
                "EVERYSTEP_ORPHAN_TIMEOUT must be more than twice EVERYSTEP_HEARTBEAT, or live "
                "runners would be taken for dead",
                id="everystep.E004",
            )
        )
    return errors
