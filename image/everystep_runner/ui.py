"""The ``ui`` role: gunicorn serving the everystep UI from the user's project, and the
role's probes answered by gunicorn's arbiter on the runner's probe port.

The probes: ``/healthz`` (also ``/livez``) and ``/readyz`` on ``metrics_bind:metrics_port``,
not on the UI's port. Gunicorn's threaded workers give a thread to every connection that
has sent a byte, until its request is whole: as many clients holding half-sent requests as
the UI has threads (2 workers x 8 by default) left the UI's own ``/healthz`` unanswered,
and an orchestrator would then restart a UI that is only busy. So the arbiter answers them
from a listener that holds no thread per connection (probe_listener.py), with gunicorn's
own view of its workers: healthy while at least one worker's heartbeat is fresh (the rule
by which the arbiter kills a stuck worker).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from everystep_runner import project
from everystep_runner.probe_listener import ProbeListener, listen
from everystep_runner.settings import RunnerSettings, probe_address

# Threads per gunicorn worker. A gthread worker waits for a connection's first bytes
# without a thread, but then holds one until the request is whole: workers * THREADS
# clients holding half-sent requests stall every page. The probes do not depend on them
# (below); a public UI belongs behind a buffering proxy (docs/security.md).
THREADS = 8


class UIServer(BaseApplication):
    """Gunicorn with its configuration taken from the runner settings, no config file.

    ``probes``, a listening socket, gets the UI's probes answered by the arbiter."""

    def __init__(self, settings: RunnerSettings, probes: socket.socket | None = None) -> None:
        self.settings = settings
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
            "logger_class": runner_logger(project.formatter(settings)),
            "proc_name": "everystep-ui",
            # Heartbeat files on a tmpfs: a container's overlay filesystem can stall them.
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
            # Gunicorn 25.1+ opens a control socket under $HOME (a read-only path in the
            # hardened image) that can resize or stop the UI: the runner has no use for it.
            "control_socket_disable": True,
        }
        if probes is not None:
            self.options |= _probe_hooks(probes)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings:  # a setting of a newer gunicorn than this one
                self.cfg.set(key, value)

    def load(self) -> Any:
        from django.conf import settings as django_settings
        from django.core.handlers.wsgi import WSGIHandler

        django_settings.ROOT_URLCONF = "everystep_runner.urls"
        # Django was set up before the fork, with the runner's log settings applied after
        # the project's LOGGING. get_wsgi_application() would set it up again in each
        # worker and put the project's LOGGING back over them.
        return WSGIHandler()


def runner_logger(formatter: logging.Formatter) -> type[Logger]:
    """Gunicorn's logger class, writing its error and access lines in the runner's format."""

    class RunnerLogger(Logger):
        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            for log in (self.error_log, self.access_log):
                for handler in log.handlers:
                    if getattr(handler, "_gunicorn", False):  # gunicorn's own, not a project's
                        handler.setFormatter(formatter)

    return RunnerLogger


def live_workers(arbiter: Any) -> int:
    """How many of the arbiter's workers have a fresh heartbeat, by its own rule
    (``Arbiter.murder_workers``); read from the probes' thread."""
    now, live = time.monotonic(), 0
    for worker in list(arbiter.WORKERS.values()):
        try:
            live += now - worker.tmp.last_update() <= arbiter.timeout
        except (OSError, ValueError):  # its heartbeat file closed: being reaped
            continue
    return live


def _probe_hooks(sock: socket.socket) -> dict[str, Any]:
    listener: list[ProbeListener] = []

    def when_ready(arbiter: Any) -> None:
        listener.append(ProbeListener(sock, lambda: live_workers(arbiter) > 0))
        listener[0].start()
        arbiter.log.info("UI probes on http://%s:%d/healthz", *sock.getsockname()[:2])

    def on_exit(arbiter: Any) -> None:
        for each in listener:
            each.stop()

    return {"when_ready": when_ready, "on_exit": on_exit}


def probe_socket(settings: RunnerSettings) -> socket.socket | None:
    """The probes' listening socket on the runner's probe address, or None when off."""
    address = probe_address(settings)
    return None if address is None else listen(*address)


def serve(settings: RunnerSettings) -> int:
    try:
        probes = probe_socket(settings)
    except OSError as exc:
        print(f"everystep-runner: cannot listen for the UI's probes: {exc}", file=sys.stderr)
        return 1
    UIServer(settings, probes).run()
    return 0
