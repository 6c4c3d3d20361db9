"""The ``ui`` role: gunicorn serving the everystep UI from the user's project."""

from __future__ import annotations

import os
from typing import Any

from gunicorn.app.base import BaseApplication

from everystep_runner.settings import RunnerSettings

# Threads per gunicorn worker. Gunicorn's sync workers serve one connection each, so as
# many slow clients as workers (two half-sent requests) hung every page and /healthz until
# the worker timeout. A gthread worker waits for a request's first bytes without a thread
# and holds one only while reading and answering it: up to workers * THREADS slow clients
# at once still leave /healthz answering. A public UI still belongs behind a buffering
# proxy (docs/security.md).
THREADS = 8


class UIServer(BaseApplication):
    """Gunicorn with its configuration taken from the runner settings, no config file."""

    def __init__(self, settings: RunnerSettings) -> None:
        self.options = {
            "bind": settings.ui_bind,
            "workers": settings.ui_workers,
            "worker_class": "gthread",
            "threads": THREADS,
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
