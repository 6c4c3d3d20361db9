"""System checks for everystep's settings (``manage.py check`` reports them)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from everystep import conf, options


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for name, (_, rule, check_id) in conf.COUNTS.items():
        if not conf.count_setting(name)[1]:
            message = f"{name} must be {rule}, got {conf.get(name)!r}"
            errors.append(checks.Error(message, id=check_id))
    # The worker's settings are validated by the very rules Worker applies, so a value
    # that passes here is one a worker accepts.
    try:
        conf.worker_options()
    except options.OptionError as exc:
        errors += [checks.Error(problem, id="everystep.E003") for problem in exc.problems]
    mode = conf.get("EVERYSTEP_METRICS_VIEW")
    if mode not in conf.METRICS_VIEW_MODES:
        errors.append(
            checks.Error(
                f"EVERYSTEP_METRICS_VIEW must be one of {', '.join(conf.METRICS_VIEW_MODES)}, "
                f"got {mode!r} (the permission rule applies meanwhile)",
                id="everystep.E005",
            )
        )
    prepared = getattr(settings, "EVERYSTEP_PREPARED_STATEMENTS", None)
    if prepared is not None and prepared is not True and prepared is not False:
        errors.append(
            checks.Error(
                f"EVERYSTEP_PREPARED_STATEMENTS must be True, False or None, got {prepared!r} "
                "(None applies meanwhile: prepared only where the connection keeps a session)",
                id="everystep.E008",
            )
        )
    if not conf.workflow_modules()[1]:
        errors.append(
            checks.Error(
                "EVERYSTEP_WORKFLOW_MODULES must be a list of dotted module names, got "
                f"{conf.get('EVERYSTEP_WORKFLOW_MODULES')!r} (none of them is imported "
                "meanwhile)",
                id="everystep.E009",
            )
        )
    errors += _check_aliases()
    errors += _check_tasks()
    return errors


# What a TASKS entry naming everystep's backend (``everystep.tasks``) may hold: it takes
# no OPTIONS yet. Checked here, from the setting alone, so the check runs whichever task
# framework is installed, and whether or not the backport is an installed app.
TASKS_BACKEND = "everystep.tasks.EverystepBackend"
TASKS_KEYS = frozenset({"BACKEND", "QUEUES", "OPTIONS"})
TASKS_OPTIONS: frozenset[str] = frozenset()


def _check_tasks() -> list[checks.CheckMessage]:
    return [checks.Error(problem, id="everystep.E010") for problem in tasks_problems()]


def tasks_problems() -> list[str]:
    """What is wrong with the ``TASKS`` entries naming everystep's backend."""
    problems: list[str] = []
    entries = getattr(settings, "TASKS", None)
    if not isinstance(entries, dict):
        return problems
    for alias, entry in entries.items():
        if not isinstance(entry, dict) or entry.get("BACKEND") != TASKS_BACKEND:
            continue
        where = f"TASKS[{alias!r}]"
        for key in sorted(set(entry) - TASKS_KEYS, key=str):
            problems.append(
                f"{where} has the key {key!r}, which EverystepBackend does not know (it "
                "reads BACKEND and QUEUES, and OPTIONS, which must be empty: it takes no "
                "options)"
            )
        options = entry.get("OPTIONS") or {}
        if not isinstance(options, dict):
            problems.append(f"{where}['OPTIONS'] must be a dict")
            continue
        for key in sorted(set(options) - TASKS_OPTIONS, key=str):
            problems.append(f"{where}['OPTIONS'] has {key!r}: EverystepBackend takes no options")
    return problems


def _check_aliases() -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    aliases = ", ".join(settings.DATABASES)
    for name, check_id in (
        ("EVERYSTEP_DATABASE", "everystep.E006"),
        ("EVERYSTEP_LISTEN_DATABASE", "everystep.E007"),
    ):
        alias = getattr(settings, name, None)
        if alias is not None and alias not in settings.DATABASES:
            errors.append(
                checks.Error(
                    f"{name} must name a DATABASES alias ({aliases}), got {alias!r}",
                    id=check_id,
                )
            )
    listen = getattr(settings, "EVERYSTEP_LISTEN_DATABASE", None)
    if listen in settings.DATABASES and "postgresql" not in settings.DATABASES[listen].get(
        "ENGINE", ""
    ):
        errors.append(
            checks.Error(
                f"EVERYSTEP_LISTEN_DATABASE names {listen!r}, which is not a PostgreSQL "
                "database: LISTEN exists only there",
                id="everystep.E007",
            )
        )
    return errors
