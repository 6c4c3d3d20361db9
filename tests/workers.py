"""How the tests and the benchmarks start a worker: a real worker subprocess against the
test database of the process that starts it, or ``Worker.run()`` on a thread of the test
process (``worker_on_thread``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from django.db import connections

if TYPE_CHECKING:
    from everystep.worker import Worker

ROOT = Path(__file__).resolve().parents[1]


def worker_env(extra_path: str | None = None) -> dict[str, str]:
    """This environment without a developer's EVERYSTEP_* configuration, pointed at the
    test settings and the test database (``EVERYSTEP_TEST_*`` is kept for that)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") or key.startswith("EVERYSTEP_TEST_")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "EVERYSTEP_TEST_SUBPROCESS": "1",
            "EVERYSTEP_TEST_LOG_LEVEL": "INFO",
            "PYTHONPATH": os.pathsep.join(filter(None, [extra_path, str(ROOT)])),
            "PYTHONUNBUFFERED": "1",
            # A worker that hangs can be made to print every thread's stack: SIGABRT.
            "PYTHONFAULTHANDLER": "1",
        }
    )
    return env


def worker_command(name: str, args: list[str]) -> list[str]:
    """``manage.py everystep_worker --name NAME ARGS…`` with this interpreter."""
    return [sys.executable, str(ROOT / "manage.py"), "everystep_worker", "--name", name, *args]


@contextmanager
def worker_process(name: str, args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker subprocess (``worker_command``) writing to ``log`` while the block
    runs; then stopped with SIGTERM (killed if it has not exited within a minute)."""
    with running(worker_command(name, args), log) as proc:
        yield proc


@contextmanager
def running(
    command: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` as a subprocess against the test database (``worker_env``, or ``env``),
    writing to ``log`` while the block runs; then stopped with SIGTERM (killed if it has
    not exited within a minute)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env or worker_env(), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def uvicorn_command(port: int) -> list[str]:
    """uvicorn serving the ASGI application of ``DJANGO_SETTINGS_MODULE`` on ``port``."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "django.core.asgi:get_asgi_application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]


def manage(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS…`` with this interpreter and ``env``, its output captured as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# An embedded test worker polls and beats often and recovers a silent runner's runs at
# once, so a test waits milliseconds for what a production worker spreads over seconds.
EMBEDDED = {"poll": 0.02, "heartbeat": 0.2, "orphan_timeout": 0}


class WorkerThread:
    """``Worker(**options).run()`` on a thread of this process, started by ``start()``;
    ``returned`` and ``raised`` hold what ``run()`` returned or raised once it ends."""

    def __init__(self, **options: object) -> None:
        # Imported here: this module is imported before Django is set up.
        from everystep.worker import Worker

        self.worker: Worker = Worker(**{**EMBEDDED, **options})  # type: ignore[arg-type]
        self.returned: list[bool] = []
        self.raised: list[BaseException] = []
        self.thread = threading.Thread(
            target=self._run, name=f"test-worker {self.worker.options.name}"
        )

    def _run(self) -> None:
        try:
            self.returned.append(self.worker.run())
        except BaseException as exc:
            self.raised.append(exc)
        finally:
            # The loop's own connection, closed as a request's would be: a test database
            # cannot be dropped while a connection to it is open.
            connections.close_all()

    def start(self) -> WorkerThread:
        self.thread.start()
        return self

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until the worker claims (its start-up and catchup are done)."""
        ready = self.worker.ready.wait(timeout)
        assert ready, f"the worker was not ready within {timeout}s (run() raised {self.raised})"

    def join(self, timeout: float = 60) -> None:
        """Wait for ``run()`` to return; fail if it has not within ``timeout`` seconds."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"run() did not return within {timeout}s"

    def stop(self, timeout: float = 60) -> None:
        """``Worker.stop()``, then wait for ``run()`` to return."""
        self.worker.stop()
        self.join(timeout)


@contextmanager
def worker_on_thread(*, wait_ready: bool = True, **options: object) -> Iterator[WorkerThread]:
    """A ``WorkerThread`` started (and ready, unless ``wait_ready=False``) for the block;
    on exit the worker is stopped, ``run()`` must return within a minute, and whatever
    it raised is raised here."""
    started = WorkerThread(**options).start()
    try:
        if wait_ready:
            started.wait_ready()
        yield started
    finally:
        started.stop()
    if started.raised:
        raise started.raised[0]
