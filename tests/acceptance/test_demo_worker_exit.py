"""Issue 18: ``everystep-runner demo`` notices when its worker process dies, says so with
the worker's exit status and stops with exit status 1, instead of serving a UI whose runs
all stay ``scheduled``; a Ctrl-C of the whole demo is still a clean stop. The demo runs on
its own SQLite file, whatever database the suite runs on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import free_port, wait_until
from tests.workers import ROOT

pytestmark = pytest.mark.tiers("pooler")


class Demo:
    """``python -m everystep_runner demo`` in its own session, with its output in a file."""

    def __init__(self, tmp_path: Path) -> None:
        self.log_path = tmp_path / "demo.log"
        env = {key: value for key, value in os.environ.items() if not key.startswith("EVERYSTEP_")}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        # HOME too: gunicorn puts its control socket under ~/.gunicorn.
        env.update({"EVERYSTEP_DEMO_DATA": str(tmp_path), "HOME": str(tmp_path)})
        env["PYTHONUNBUFFERED"] = "1"
        bind = f"127.0.0.1:{free_port()}"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "everystep_runner", "--ui-bind", bind, "demo"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pid(self) -> int | None:
        """The pid of the demo's worker child, found through /proc."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            if parent == self.proc.pid and b"demo-worker" in cmdline:
                return int(entry.name)
        return None

    def started(self) -> int:
        """Wait until the worker runs; its pid."""
        wait_until(
            lambda: "worker demo-worker starting" in self.log() or self.proc.poll() is not None,
            120,
            "the demo's worker",
        )
        assert self.proc.poll() is None, self.log()
        pid = self.worker_pid()
        assert pid is not None, self.log()
        return pid

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the demo did not exit within {timeout:g}s:\n{self.log()[-4000:]}"
            ) from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    started = Demo(tmp_path)
    try:
        yield started
    finally:
        started.kill()


def crashed(log: str) -> bool:
    """Whether a process of the demo printed a Python traceback. A run's failure record
    carries its stored traceback too, indented behind ``|`` (the demo has a workflow that
    fails on purpose, and whether it got that far depends on the timing): not a crash."""
    return re.search(r"^Traceback \(most recent call last\)", log, re.MULTILINE) is not None


def test_the_demo_stops_with_status_1_when_its_worker_is_killed(demo: Demo):
    """SIGKILL to the demo's worker: the demo says the worker was killed by SIGKILL (with
    its pid) and exits 1, its UI stopped."""
    pid = demo.started()
    os.kill(pid, signal.SIGKILL)
    assert demo.wait(60) == 1
    log = demo.log()
    assert (
        f"everystep demo: the worker process 'demo-worker' (pid {pid}) was killed by SIGKILL; "
        "no run can start without it"
    ) in log
    assert not crashed(log), log


def test_ctrl_c_still_stops_the_demo_cleanly(demo: Demo):
    """SIGINT to the whole demo (Ctrl-C in a terminal) stops it with status 0 and no word
    about a dead worker, although the worker exits too."""
    demo.started()
    os.killpg(demo.proc.pid, signal.SIGINT)
    assert demo.wait(90) == 0
    log = demo.log()
    assert "everystep demo: the worker process" not in log
    assert "worker demo-worker stopped" in log
    assert not crashed(log), log
