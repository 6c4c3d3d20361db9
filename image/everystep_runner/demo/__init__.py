"""The ``demo`` role: the bundled example project on SQLite (or ``database_url``),
migrated, sample workflows scheduled, a worker subprocess and the UI running."""

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
    from everystep_runner import project, ui
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
        return ui.serve(settings)
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
