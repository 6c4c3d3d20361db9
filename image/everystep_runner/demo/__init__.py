"""The ``demo`` role: the bundled example project on its own SQLite file, migrated, sample
workflows scheduled, a worker subprocess and the UI running, on 127.0.0.1 unless
``ui_bind`` is given. The project: ``settings`` (its Django settings) and ``orders`` (its
one app, the sample workflows).

The demo serves a public UI with a fixed secret key and its worker fails every run it does
not know: on any database but its own file it would expose that database's runs and end
them. So it refuses ``database_url`` and ``settings_module`` from every source, and checks
the database Django ended up with before it writes anything.

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
# Where the demo serves unless ui_bind is given: this machine only.
DEFAULT_BIND = "127.0.0.1:8000"
# Settings that would point the demo at another database; refused whatever their source.
REFUSED = ("database_url", "listen_database_url", "settings_module")


class DemoRefused(Exception):
    """The demo was configured to use a database other than its own SQLite file."""


def run(settings: RunnerSettings) -> int:
    """Migrate, schedule samples, start a worker, serve the UI until stopped."""
    try:
        settings = load_demo(settings)
    except DemoRefused as exc:
        print(f"everystep-runner demo: {exc}", file=sys.stderr)
        return 2
    return migrate_and_serve(settings)


def load_demo(settings: RunnerSettings) -> RunnerSettings:
    """Set Django up with the demo project on its own database; the settings the demo runs
    with. ``DemoRefused`` before anything is opened if it was given another database."""
    from everystep_runner import project

    refuse_other_databases(settings)
    settings = settings.model_copy(
        update={
            "settings_module": SETTINGS_MODULE,
            "project_dir": DEMO_DIR,
            "ui_bind": bind(settings),
        }
    )
    project.load(settings)
    project.configure_logging(settings)
    check_own_database()
    return settings


def refuse_other_databases(settings: RunnerSettings) -> None:
    """``DemoRefused`` naming the setting and its source if the demo was given a database
    or a project (an ``EVERYSTEP_DATABASE_URL`` left in a shell or a compose file)."""
    from everystep_runner.settings import sources

    origins = sources(settings)
    for name in REFUSED:
        if getattr(settings, name) is not None:
            raise DemoRefused(
                f"refusing to start: {name} is set (from {origins[name]}), but the demo only "
                f"ever uses its own SQLite file under {demo_data()}. Unset {name} to run the "
                "demo; to run your project, use the worker or ui role instead."
            )


def check_own_database() -> None:
    """``DemoRefused`` unless Django's only database is the demo's own SQLite file: the
    last check before the demo migrates, schedules and claims anything."""
    from django.conf import settings as django_settings

    from everystep_runner.demo.settings import DATA_DIR

    # Compared by value, not with the settings module's dict: the runner's overrides
    # replace DATABASES["default"] inside that very dict.
    databases = django_settings.DATABASES
    default = databases.get("default", {})
    own = (
        set(databases) == {"default"}
        and default.get("ENGINE") == "django.db.backends.sqlite3"
        and Path(default.get("NAME", "")) == DATA_DIR / "demo.sqlite3"
    )
    if not own:
        raise DemoRefused(
            "refusing to start: Django's DATABASES are not the demo's own SQLite file "
            f"{DATA_DIR / 'demo.sqlite3'}"
        )


def demo_data() -> Path:
    """The demo's data directory (its SQLite file), without importing its settings."""
    return Path(os.environ.get("EVERYSTEP_DEMO_DATA", Path.home() / ".everystep-demo"))


def bind(settings: RunnerSettings) -> str:
    """The demo's UI address: ``ui_bind`` if it was given (from any source), else
    127.0.0.1:8000. A container publishing the port passes ``--ui-bind 0.0.0.0:8000``."""
    from everystep_runner.settings import sources

    return settings.ui_bind if sources(settings)["ui_bind"] != "default" else DEFAULT_BIND


def migrate_and_serve(settings: RunnerSettings) -> int:
    from django.core.management import call_command
    from django.db import connections

    from everystep.options import BY_NAME
    from everystep_runner.settings import worker_options

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

    # Only the demo's own database: no database_url reaches the worker, from any variable.
    refused = {f"EVERYSTEP_{name.upper()}{end}" for name in REFUSED for end in ("", "_FILE")}
    env = {key: value for key, value in os.environ.items() if key not in refused}
    env.update(
        {"EVERYSTEP_SETTINGS_MODULE": SETTINGS_MODULE, "EVERYSTEP_PROJECT_DIR": str(DEMO_DIR)}
    )
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
