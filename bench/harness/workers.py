"""Worker subprocesses: ``manage.py everystep_worker`` of the measured tree, each logging
to its own file; ``Workers`` remembers every one started so a ``finally`` can kill them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.cpu import process_cpu_seconds, process_rss_mb
from harness.runs import wait_for

BENCH = Path(__file__).resolve().parents[1]
EXIT_TIMEOUT = 60.0  # above the worker's default 30 s drain


def worker_env(source: Path, log_level: str, extra: dict[str, str | None]) -> dict[str, str]:
    """This environment without a developer's ``EVERYSTEP_*`` configuration, with the
    settings module ``session.configure`` chose, ``source`` and ``bench/`` importable."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") or key.startswith("EVERYSTEP_TEST_")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"],
            "EVERYSTEP_TEST_SUBPROCESS": "1",
            "EVERYSTEP_TEST_LOG_LEVEL": log_level,
            "PYTHONPATH": os.pathsep.join([str(source), str(BENCH)]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class WorkerProcess:
    """One ``manage.py everystep_worker`` of ``source``, logging to its own file."""

    def __init__(
        self,
        source: Path,
        name: str,
        args: list[str],
        log_path: Path,
        *,
        log_level: str = "INFO",
        env: dict[str, str | None] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        command = [sys.executable, str(source / "manage.py"), "everystep_worker", "--name", name]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*command, *args],
                cwd=source,
                env=worker_env(source, log_level, env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{tail}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until its heartbeat row exists and its CPU use has settled (start-up done)."""
        from everystep.models import Runner

        row = Runner.objects.filter(name=self.name)
        wait_for(row.exists, timeout, 0.05, self.check_alive)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = process_cpu_seconds(self.pid)
            time.sleep(0.3)
            self.check_alive()
            if process_cpu_seconds(self.pid) - before <= 0.03:
                return
        raise TimeoutError(f"worker {self.name} kept busy for {timeout:.0f}s after start")

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def rss_mb(self) -> float:
        return process_rss_mb(self.pid)

    def terminate(self) -> int | None:
        """SIGTERM, then wait for the drain; the exit code, or None if it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def problems(self) -> list[str]:
        """Log lines at WARNING or above, and traceback headers."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        keys = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
        return [f"{self.name}: {line}" for line in lines if any(k in line for k in keys)]


class Workers:
    """Every worker subprocess started, so a ``finally`` can kill them all."""

    def __init__(self, source: Path, log_dir: Path, log_level: str = "INFO") -> None:
        self.source = source
        self.log_dir = log_dir
        self.log_level = log_level
        self.started: list[WorkerProcess] = []

    def start(
        self, name: str, *args: str, env: dict[str, str | None] | None = None
    ) -> WorkerProcess:
        taken = {worker.name for worker in self.started}
        base, number = name, 1
        while name in taken:  # a phase measured again: a name of its own, and its own log
            number += 1
            name = f"{base}-{number}"
        return self._spawn(name, args, f"{name}.log", env)

    def start_fleet(
        self, name: str, count: int, *args: str, env: dict[str, str | None] | None = None
    ) -> list[WorkerProcess]:
        """``count`` workers (``name``, or ``name-w1`` … for several), started and idle:
        start-up is over when this returns."""
        fleet = [
            self.start(name if count == 1 else f"{name}-w{number}", *args, env=env)
            for number in range(1, count + 1)
        ]
        for worker in fleet:
            worker.wait_ready()
        return fleet

    def start_group(
        self, name: str, processes: int, *args: str, env: dict[str, str | None] | None = None
    ) -> WorkerProcess:
        """One worker ``--processes processes``, started and idle: every child holds its
        name (``name``, ``name/1`` …) and has had a second to settle."""
        from everystep.models import Runner

        group = self.start(name, *args, "--processes", str(processes), env=env)
        group.wait_ready()
        children = Runner.objects.filter(name__startswith=name)
        wait_for(lambda: children.count() >= processes, 60.0, 0.05, group.check_alive)
        time.sleep(1.0)  # the last child's start-up; wait_ready measures the supervisor
        return group

    def restart(
        self, name: str, *args: str, env: dict[str, str | None] | None = None
    ) -> WorkerProcess:
        """Another process under exactly ``name``, as a supervisor restarts a crashed
        worker (it then resumes the runs parked under that name), with a log of its own."""
        count = sum(1 for worker in self.started if worker.name == name)
        return self._spawn(name, args, f"{name}.{count + 1}.log", env)

    def _spawn(
        self, name: str, args: tuple[str, ...], log: str, env: dict[str, str | None] | None
    ) -> WorkerProcess:
        worker = WorkerProcess(
            self.source, name, list(args), self.log_dir / log, log_level=self.log_level, env=env
        )
        self.started.append(worker)
        return worker

    def problems(self) -> list[str]:
        return [line for worker in self.started for line in worker.problems()]

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()
