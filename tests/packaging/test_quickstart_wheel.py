"""docs/quickstart.md, followed literally by a new user with the built wheel.

A fresh virtualenv with the wheel; ``django-admin startproject`` and ``startapp`` as the
page shows them (so the project has Django's defaults: ``DEBUG = True``, ``USE_TZ = True``,
SQLite); the page's settings excerpts, its ``workflows.py`` and its commands, read from the
page (``tests/packaging/quickstart_page.py`` says how blocks are marked); then a real
``everystep_worker`` process runs the scheduled run to ``completed``, the page's Python
blocks run in ``manage.py shell`` beside it (several times each, so a block that races the
worker shows), and the worker stops on SIGTERM.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from tests.packaging.conftest import clean_env, run
from tests.packaging.quickstart_page import Block, blocks, extend_lists

UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
FINAL = {"completed", "failed", "stopped", "blocked", "cancelled"}
WAIT = 180  # seconds: generous, the run takes well under one on an idle machine
# How often each ``shell`` block runs beside the worker: a block that raced it (the page's
# run_due() and status check did) failed about one try in two.
REPEAT = 3


class Quickstart:
    """A user following the page: a shell in the new virtualenv, a project directory."""

    def __init__(self, venv: Path, home: Path) -> None:
        self.home = home
        self.env = clean_env(PATH=f"{venv}:{clean_env()['PATH']}", VIRTUAL_ENV=str(venv.parent))
        self.project: Path | None = None
        self.printed: list[str] = []  # stdout of every command, for the run ids
        self.written: list[str] = []  # the modules the page wrote, as dotted names

    def sh(self, block: Block, cwd: Path) -> None:
        done = run(["bash", "-euo", "pipefail", "-c", block.code], cwd=cwd, env=self.env)
        self.printed.append(done.stdout)

    def new_project(self, block: Block) -> None:
        self.sh(block, self.home)
        (manage,) = self.home.glob("*/manage.py")
        self.project = manage.parent

    def edit(self, block: Block) -> None:
        assert self.project is not None and block.target is not None
        path = self.project / block.target
        if block.action == "write":
            assert path.parent.is_dir() and not path.exists(), path
            path.write_text(block.code)
            self.written.append(".".join(Path(block.target).with_suffix("").parts))
        else:
            path.write_text(path.read_text() + "\n" + extend_lists(block.code))

    def shell(self, session: list[Block]) -> None:
        """Consecutive blocks in one ``manage.py shell``, after the page's own modules are
        imported, as a user types them there (``-v 0``: Django 5.2+ would first list its
        automatic imports)."""
        imports = "".join(f"from {module} import *\n" for module in self.written)
        self.manage("shell", "-v", "0", "-c", imports + "".join(b.code for b in session))

    def manage(self, *args: str) -> str:
        assert self.project is not None
        return run(["python", "manage.py", *args], cwd=self.project, env=self.env).stdout

    def runs(self) -> list[dict]:
        """Every run, from the page's own listing command (``--json``)."""
        out = self.manage("everystep_runs", "--json", "--limit", "1000")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_the_page_installs_the_app_and_logging_before_the_worker_runs():
    """The marked blocks, in page order: a project, settings that install everystep and
    give its logger a handler, then the worker (without LOGGING it would print nothing)."""
    page = blocks()
    actions = [b.action for b in page]
    worker = actions.index("worker")
    settings = [extend_lists(b.code) for b in page[:worker] if b.action == "append"]
    assert actions[0] == "new-project"
    assert any(
        '"everystep"' in code and "INSTALLED_APPS = [*INSTALLED_APPS" in code for code in settings
    )
    assert any("LOGGING" in code and '"everystep"' in code for code in settings)
    assert "write" in actions[:worker] and "run" in actions[:worker]


def test_the_page_runs_its_python_blocks_beside_the_worker():
    """The Python blocks a user types into a shell while the worker runs (the run_due()
    and result() examples) are marked ``shell``, after the worker, so this tier runs them
    as written beside it."""
    page = blocks()
    actions = [b.action for b in page]
    shells = [b for b in page if b.action == "shell"]
    assert shells and actions.index("worker") < actions.index("shell")
    assert any("run_due()" in b.code and "result(" in b.code for b in shells)


def test_the_quickstart_runs_from_the_built_wheel(venv: Path, tmp_path: Path):
    """Following docs/quickstart.md in a new project with the wheel, the command that
    schedules a run prints its id alone, the worker completes that run and logs it, the
    page's Python blocks pass in a shell beside the worker each time they run, and the
    worker exits 0 on SIGTERM."""
    user = Quickstart(venv, tmp_path)
    page = blocks()
    assert [b.action for b in page].count("worker") == 1
    worker, log, shells = None, tmp_path / "worker.log", 0
    before: list[str] = []  # what the commands before the worker printed
    try:
        for block, session in _with_sessions(page):
            if session:
                assert worker is not None, "a shell block before the worker"
                for _ in range(REPEAT):
                    user.shell(session)
                shells += len(session)
            elif block.action == "new-project":
                user.new_project(block)
            elif block.action in ("append", "write"):
                user.edit(block)
            elif block.action == "run":
                assert user.project is not None, "a command before the project exists"
                user.sh(block, user.project)
            else:
                before = list(user.printed)
                worker = _start_worker(user, block, log)
                _wait_for_final_runs(user, worker, log)
        assert worker is not None
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=WAIT) == 0, log.read_text()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()

    scheduled = set(UUID.findall("".join(before)))
    assert scheduled, "the page's commands printed no run id before the worker started"
    assert _printed_ids_alone(before), before
    assert shells, "the page has no Python block for the shell beside the worker"

    runs = {r["id"]: r for r in user.runs()}
    assert scheduled <= set(runs)
    output = log.read_text()
    for run_id in scheduled:
        summary = runs[run_id]
        assert summary["status"] == "completed", (summary, output)
        assert f"run {run_id} ({summary['name']}) completed" in output, output
    # The shell blocks' runs (their own asserts checked them): completed, or stopped by
    # Terminal as the page says; never left unfinished or failed.
    assert {r["status"] for r in runs.values()} <= {"completed", "stopped"}, runs


def _with_sessions(page: list[Block]) -> list[tuple[Block, list[Block]]]:
    """The page's blocks in order, each with ``[]``, except that consecutive ``shell``
    blocks come once, as one session (the last of them with all of them): a user types
    them into the same shell, where a block uses the names the one before defined."""
    steps: list[tuple[Block, list[Block]]] = []
    for block in page:
        if block.action != "shell":
            steps.append((block, []))
        elif steps and steps[-1][1]:
            steps[-1] = (block, [*steps[-1][1], block])
        else:
            steps.append((block, [block]))
    return steps


def _printed_ids_alone(printed: list[str]) -> bool:
    """A command that prints a run id prints that alone, so ``RUN=$(…)`` captures it."""
    return all(UUID.fullmatch(out.strip()) for out in printed if UUID.search(out))


def _start_worker(user: Quickstart, block: Block, log: Path) -> subprocess.Popen[bytes]:
    """The page's worker command as a process of its own (no shell between it and the
    signal the test sends)."""
    (command,) = [line for line in block.code.splitlines() if line.strip()]
    with log.open("wb") as out:
        return subprocess.Popen(
            shlex.split(command, comments=True),
            cwd=user.project,
            env=user.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_for_final_runs(user: Quickstart, worker: subprocess.Popen[bytes], log: Path) -> None:
    """Until every scheduled run is final; a worker that exits first fails the test."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert worker.poll() is None, f"the worker exited {worker.returncode}:\n{log.read_text()}"
        runs = user.runs()
        if runs and all(r["status"] in FINAL for r in runs):
            return
        time.sleep(1)
    raise AssertionError(f"runs not final after {WAIT} s: {user.runs()}\n{log.read_text()}")
