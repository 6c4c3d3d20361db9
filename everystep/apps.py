from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string, module_has_submodule


class EverystepConfig(AppConfig):
    name = "everystep"
    verbose_name = "everystep"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from everystep import (  # noqa: F401  (receivers)
            checks,
            conf,
            logs,
            metrics,
            sentry,
            task_runs,
        )
        from everystep.builtins import bulk_action  # noqa: F401  (registers everystep.bulk_action)
        from everystep.store import network

        metrics.install()
        sentry.install()
        # Every process, not only workers: a web process awaiting a run (``result()``,
        # the waiters' hub) must not hang on a connection a network fault left silent.
        network.configure(conf.worker_default("network_timeout"))
        # Like the admin's admin.py: every installed app's ``workflows`` module is imported,
        # so a worker knows every @workflow before its first claim, whatever it was started
        # by (manage.py everystep_worker, the runner, an embedded Worker). A worker imports
        # nothing for a run's name, so what is not known now is never run.
        discover("workflows")
        # Likewise each app's ``tasks`` module, Django's conventional place for @task
        # functions, when a TASKS backend is everystep's: otherwise those modules belong
        # to another task system (Celery's tasks.py), which everystep leaves alone.
        if tasks_on_everystep():
            discover("tasks")
        # Then the modules the project names; an invalid setting is a system check error.
        for module in conf.workflow_modules()[0]:
            import_at_start(module, "named in EVERYSTEP_WORKFLOW_MODULES")


def discover(submodule: str) -> None:
    """Import every installed app's module ``submodule``, if it has one."""
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, submodule):
            import_at_start(f"{config.name}.{submodule}", f"installed app {config.label!r}")


def import_at_start(module: str, why: str) -> None:
    """Import ``module`` as Django starts; what it raises names it. A ``SystemExit`` (or
    another ``BaseException`` but Ctrl-C) becomes ``ImproperlyConfigured``: raised as
    is, it would end the process, a worker's included, with no word of which module
    did it, each time a supervisor restarts it."""
    try:
        import_module(module)
    except Exception as exc:
        exc.add_note(f"(importing {module!r}, {why})")
        # A task that fails Django's validation as it is defined (a queue the backend
        # does not list) may owe it to a misspelt TASKS key: say so here, since this
        # ends the start before the system checks could.
        from everystep.checks import tasks_problems

        for problem in tasks_problems():
            exc.add_note(problem)
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise ImproperlyConfigured(
            f"importing {module!r} ({why}) raised {type(exc).__name__}"
            f"{_args_of(exc)}: a module imported as Django starts must not end the process"
        ) from exc


def _args_of(exc: BaseException) -> str:
    return f"({', '.join(repr(arg) for arg in exc.args)})"


def tasks_on_everystep() -> bool:
    """Whether a backend of the ``TASKS`` setting is everystep's."""
    from everystep.task_framework import is_everystep_backend

    entries = getattr(settings, "TASKS", None)
    if not isinstance(entries, dict):
        return False
    for entry in entries.values():
        path = entry.get("BACKEND") if isinstance(entry, dict) else None
        if not isinstance(path, str):
            continue
        try:
            backend = import_string(path)
        except Exception:  # Django reports a bad BACKEND when a task uses it
            continue
        if is_everystep_backend(backend):
            return True
    return False
