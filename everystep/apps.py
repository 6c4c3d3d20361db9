from __future__ import annotations

from django.apps import AppConfig


class EverystepConfig(AppConfig):
    name = "everystep"
    verbose_name = "everystep"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from everystep import checks, logs, metrics, sentry  # noqa: F401  (signal receivers)

        metrics.install()
        sentry.install()
