"""The ``manage.py everystep_worker`` subprocesses a benchmark starts, with their logs."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the test project (tests/) is imported
    sys.path.insert(0, str(ROOT))

from tests.workers import worker_command, worker_env  # noqa: E402

EXIT_TIMEOUT = 60.0  # above the worker's default 30 s drain


@dataclass
class WorkerProcess:
    """One ``manage.py everystep_worker`` subprocess writing to its own log file."""

    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] = field(init=False)

    def __post_init__(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                worker_command(self.name, self.args),
                cwd=ROOT,
                env=worker_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{tail}")

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
    """Every worker subprocess this benchmark starts, so a ``finally`` can kill them."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(self, name: str, *args: str) -> WorkerProcess:
        worker = WorkerProcess(name, list(args), self.log_dir / f"{name}.log")
        self.started.append(worker)
        return worker

    def problems(self) -> list[str]:
        return [line for worker in self.started for line in worker.problems()]

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()
