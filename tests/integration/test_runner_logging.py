"""The runner's log format and level in every launch form (issue 53): the worker role, and
a management command's argument list as the Kubernetes StatefulSet gives it
(``everystep_worker --pool … --name …``), with a project ``LOGGING`` that names the
``everystep`` logger in a format of its own. The command form runs ``django.setup()``
again, which applied that LOGGING over the runner's: bare lines, the level ignored."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_runner_probes import answering, free_port, logging_project_env

FORMS = {
    "worker-role": ["worker"],
    "command-args": ["everystep_worker", "--pool", "2", "--name", "k8s-0", "--drain", "5"],
}


def runner(tmp_path: Path, level: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """The runner on the logging project (json, ``level``), its probes on a free port."""
    probe = free_port()
    env = logging_project_env(
        tmp_path,
        EVERYSTEP_METRICS_PORT=str(probe),
        EVERYSTEP_METRICS_BIND="127.0.0.1",
        EVERYSTEP_LOG_LEVEL=level,
    )
    command = [sys.executable, "-m", "everystep_runner"]
    migrated = subprocess.run(
        [*command, "migrate", "-v", "0"], env=env, cwd=tmp_path, capture_output=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stderr.decode()
    log = tmp_path / "runner.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, *args], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 90
    while not answering(f"http://127.0.0.1:{probe}/healthz"):
        assert proc.poll() is None, f"the runner exited:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no probe answer:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)
    return proc, log


def stopped(proc: subprocess.Popen[bytes], log: Path) -> list[str]:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-4000:]
    return [line for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("form", FORMS)
def test_every_everystep_line_is_json_at_the_runners_level(tmp_path: Path, form: str):
    proc, log = runner(tmp_path, "DEBUG", *FORMS[form])
    lines = stopped(proc, log)
    assert not [line for line in lines if "PROJECT-FORMAT" in line], "\n".join(lines)
    records = [json.loads(line) for line in lines]
    assert {"worker.starting", "worker.stopped"} <= {r.get("event") for r in records}
    assert all(r["logger"].startswith("everystep") for r in records), records
    assert "DEBUG" in {r["level"] for r in records}, "EVERYSTEP_LOG_LEVEL=DEBUG held"


@pytest.mark.parametrize("form", FORMS)
def test_the_runners_level_silences_what_is_below_it(tmp_path: Path, form: str):
    proc, log = runner(tmp_path, "WARNING", *FORMS[form])
    lines = stopped(proc, log)
    assert not [line for line in lines if "PROJECT-FORMAT" in line], "\n".join(lines)
    assert all(json.loads(line)["level"] in {"WARNING", "ERROR"} for line in lines), lines
