from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EverystepConfig(AppConfig):
    name = "everystep"
    verbose_name = "everystep"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from everystep import checks, conf, logs, metrics, sentry  # noqa: F401  (receivers)
        from everystep.engine import bulk_run  # noqa: F401  (registers everystep.bulk_action)
        from everystep.store import network

        metrics.install()
        sentry.install()
        # Every process, not only workers: a web process awaiting a run (``result()``,
        # the waiters' hub) must not hang on a connection a network fault left silent.
        network.configure(conf.worker_default("network_timeout"))
        # Like the admin's admin.py: every installed app's ``workflows`` module is imported,
        # so a worker knows every @workflow before its first claim, whatever it was started
        # by (manage.py everystep_worker, the runner, an embedded Worker).
        autodiscover_modules("workflows")
        # Then the modules the project names; an invalid setting is a system check error.
        for module in conf.workflow_modules()[0]:
            try:
                import_module(module)
            except Exception as exc:
                exc.add_note(f"(importing {module!r}, named in EVERYSTEP_WORKFLOW_MODULES)")
                raise
