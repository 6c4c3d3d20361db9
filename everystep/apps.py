from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EverystepConfig(AppConfig):
    name = "everystep"
    verbose_name = "everystep"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from everystep import checks, logs, metrics, sentry  # noqa: F401  (signal receivers)

        metrics.install()
        sentry.install()
        # Like the admin's admin.py: every installed app's ``workflows`` module is imported,
        # so a worker knows every @workflow before its first claim, whatever it was started
        # by (manage.py everystep_worker, the runner, an embedded Worker).
        autodiscover_modules("workflows")
