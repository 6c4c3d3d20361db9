"""The ``ui`` role: gunicorn serving the everystep UI from the user's project."""

from __future__ import annotations

import os
from typing import Any

from gunicorn.app.base import BaseApplication

from everystep_runner.settings import RunnerSettings


class UIServer(BaseApplication):
    """Gunicorn with its configuration taken from the runner settings, no config file."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.options = {
            "bind": settings.ui_bind,
            "workers": settings.ui_workers,
            "timeout": settings.ui_timeout,
            "graceful_timeout": settings.ui_timeout,
            "accesslog": "-",
            "errorlog": "-",
            "loglevel": settings.log_level.lower(),
            "proc_name": "everystep-ui",
            # Heartbeat files on a tmpfs: a container's overlay filesystem can stall them.
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from django.conf import settings as django_settings
        from django.core.wsgi import get_wsgi_application

        django_settings.ROOT_URLCONF = "everystep_runner.urls"
        return get_wsgi_application()


def serve(settings: RunnerSettings) -> int:
    UIServer(settings).run()
    return 0
