"""How the acceptance tests and the benchmarks start a real worker subprocess against the
test database of the process that starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
