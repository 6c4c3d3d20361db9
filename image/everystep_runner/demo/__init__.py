"""The ``demo`` role: the bundled example project on SQLite (or ``database_url``),
migrated, sample workflows scheduled, a worker subprocess and the UI running.

If the worker process dies, the demo says so, with the worker's exit status, and stops
with exit status 1 rather than restarting it: a worker that crashes at start would only
crash again, and a demo whose runs all stay ``scheduled`` under "worker running" is the
worst first impression."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the Django settings module lives in this package: keep imports light
    from everystep_runner.settings import RunnerSettings

DEMO_DIR = Path(__file__).resolve().parent
SETTINGS_MODULE = "everystep_runner.demo.settings"


def run(settings: RunnerSettings) -> int:
    """Migrate, schedule samples, start a worker, serve the UI until stopped."""
    from everystep.options import BY_NAME
    from everystep_runner import project
    from everystep_runner.settings import worker_options

    settings = settings.model_copy(
        update={"settings_module": SETTINGS_MODULE, "project_dir": DEMO_DIR}
    )
    project.load(settings)
    project.configure_logging(settings)
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    scheduled = schedule_samples()
    connections.close_all()  # nothing open may be shared with gunicorn's forked workers
    worker = start_worker(settings)
    host, _, port = settings.ui_bind.rpartition(":")
    print(
        f"everystep demo: {scheduled} sample runs scheduled; worker 'demo-worker' running;\n"
        f"  UI on http://{'localhost' if host in ('', '0.0.0.0') else host}:{port}/ "
        "(public: demo only). Ctrl-C stops everything.",
        flush=True,
    )
    try:
        return serve_watching(settings, worker)
    finally:
        worker.send_signal(signal.SIGTERM)
        drain = worker_options(settings).get("drain", BY_NAME["drain"].default)
        worker.wait(timeout=drain + 30)


def schedule_samples() -> int:
    from everystep import schedule
    from everystep_runner.demo.orders.workflows import nightly_report, place_order, sync_catalogue

    samples: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (place_order, (1, ["book", "lamp"], 4_500)),
        (place_order, (2, ["car"], 2_500_000)),
        (place_order, (3, ["tea"], 900)),
        (sync_catalogue, (3,)),
        (sync_catalogue, (5,)),
        (nightly_report, (["sales", "stock", "returns", "forecast", "summary"],)),
    ]
    for flow, flow_args in samples:
        schedule(flow, *flow_args)
    return len(samples)


def start_worker(settings: RunnerSettings) -> subprocess.Popen[bytes]:
    from everystep_runner.settings import worker_flags

    env = dict(os.environ)
    env.update(
        {"EVERYSTEP_SETTINGS_MODULE": SETTINGS_MODULE, "EVERYSTEP_PROJECT_DIR": str(DEMO_DIR)}
    )
    if settings.database_url is not None:
        env["EVERYSTEP_DATABASE_URL"] = settings.database_url.get_secret_value()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "everystep_runner",
            *worker_flags(settings),  # the worker options given to the demo
            "--name",
            "demo-worker",
            "--log-level",
            settings.log_level,
            "--log-format",
            settings.log_format,
            "worker",
        ],
        env=env,
    )


def serve_watching(settings: RunnerSettings, worker: subprocess.Popen[bytes]) -> int:
    """Serve the UI until stopped, or until ``worker`` exits (then exit status 1)."""
    from gunicorn.arbiter import Arbiter
    from gunicorn.errors import HaltServer

    from everystep_runner.ui import UIServer

    class WatchingArbiter(Arbiter):
        """Gunicorn's arbiter, also watching the demo's worker. Gunicorn reaps every
        child of its process (``waitpid(-1)``), so the worker's exit is read here first,
        before the arbiter's reaping would swallow its status; and on every turn of the
        loop, for a worker that died before gunicorn started."""

        watching = True

        def stop(self, graceful: bool = True) -> None:
            # Stopping (Ctrl-C, SIGTERM, or the worker's death): the worker may exit
            # meanwhile, as it should; that is no news, and halting must not raise.
            self.watching = False
            super().stop(graceful)

        def reap_workers(self) -> None:
            self.check_demo_worker()
            super().reap_workers()

        def manage_workers(self) -> None:
            self.check_demo_worker()
            super().manage_workers()

        def check_demo_worker(self) -> None:
            if not self.watching or worker.poll() is None:
                return
            self.watching = False
            reason = worker_exit(worker)
            print(f"everystep demo: {reason}; stopping the demo.", file=sys.stderr, flush=True)
            raise HaltServer(reason, 1)

    class DemoUI(UIServer):
        def run(self) -> None:
            WatchingArbiter(self).run()

    DemoUI(settings).run()
    return 0


def worker_exit(worker: subprocess.Popen[bytes]) -> str:
    """What happened to the worker process, for a person: its pid and exit status."""
    status = worker.returncode
    if status is not None and status < 0:
        try:
            how = f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            how = f"was killed by signal {-status}"
    else:
        how = f"exited with status {status}"
    return (
        f"the worker process 'demo-worker' (pid {worker.pid}) {how}; no run can start "
        "without it (its log is above)"
    )
