"""Real worker subprocesses against the pytest session's test database."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.workers import ROOT, worker_command, worker_env

_LIVE: list[WorkerProcess] = []


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until truthy; fail early if a worker that should be running died."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in _LIVE:
            if proc.expect_alive and proc.proc.poll() is not None:
                raise AssertionError(
                    f"worker {proc.name} exited with {proc.proc.returncode} while waiting "
                    f"for {what}:\n{proc.log()[-3000:]}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.log()[-1500:]}" for p in _LIVE)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(0.1)


class WorkerProcess:
    """One ``manage.py everystep_worker`` subprocess with its log file."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log: Path,
        extra_path: str | None = None,
        env: dict[str, str] | None = None,
        wrap: list[str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log
        self.expect_alive = True
        self._log = open(log, "wb")  # noqa: SIM115  (closed in wait/kill)
        # ``wrap``: a command the worker runs under, e.g. ``ip netns exec NS`` (which
        # execs the worker, so the pid and the signals are the worker's own).
        self.proc = subprocess.Popen(
            [*(wrap or []), *worker_command(name, args)],
            cwd=ROOT,
            env={**worker_env(extra_path), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            self.expect_alive = False
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit code; a worker still alive after ``timeout`` fails the test with every
        thread's stack (SIGABRT under PYTHONFAULTHANDLER, see ``worker_env``)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            raise AssertionError(
                f"worker {self.name} did not exit within {timeout:g}s; its log and stacks:\n"
                f"{self.log()[-12000:]}"
            ) from None
        finally:
            self._log.flush()

    def thread_count(self) -> int:
        """The process's threads now (Linux: /proc)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("Threads:"))[8:])

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._log.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker subprocesses; every one still alive is killed at teardown."""
    started: list[WorkerProcess] = []

    def start(
        name: str,
        *args: str,
        extra_path: str | None = None,
        env: dict[str, str] | None = None,
        wrap: list[str] | None = None,
    ) -> WorkerProcess:
        log = tmp_path / f"{name}-{len(started)}.log"
        proc = WorkerProcess(name, list(args), log, extra_path, env, wrap)
        started.append(proc)
        _LIVE.append(proc)
        return proc

    yield start
    _LIVE.clear()
    for proc in started:
        if proc.proc.poll() is None:
            proc.signal(signal.SIGKILL)
        proc.kill()
    # Connections of the test thread may have been broken by a database restart.
    connections.close_all()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET http://127.0.0.1:port/path; (status, body), or (0, error) if unreachable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def database_server(action: str) -> None:
    """Stop, start or restart the server of the backend under test (PostgreSQL, MariaDB)."""
    if os.environ.get("EVERYSTEP_TEST_DB") == "postgres":
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action]
        subprocess.run(command, check=True, timeout=120)
        return
    if action in ("stop", "restart"):
        subprocess.run(["mariadb-admin", "-uroot", "shutdown"], check=True, timeout=120)
    if action in ("start", "restart"):
        subprocess.run(
            [
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ],
            check=True,
            timeout=60,
        )
        wait_until(
            lambda: (
                subprocess.run(
                    ["mariadb-admin", "-h127.0.0.1", "-uroot", "ping"], capture_output=True
                ).returncode
                == 0
            ),
            120,
            "MariaDB",
        )
