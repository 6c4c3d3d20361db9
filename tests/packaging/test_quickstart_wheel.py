"""docs/quickstart.md, followed literally by a new user with the built wheel.

A fresh virtualenv with the wheel; ``django-admin startproject`` and ``startapp`` as the
page shows them (so the project has Django's defaults: ``DEBUG = True``, ``USE_TZ = True``,
SQLite); the page's settings excerpts, its ``workflows.py`` and its commands, read from the
page (``tests/packaging/quickstart_page.py`` says how blocks are marked); then a real
``everystep_worker`` process runs the scheduled run to ``completed``, the page's Python
blocks run in ``manage.py shell`` beside it (several times each, so a block that races the
worker shows), and the worker stops on SIGTERM. Then the page's ``@task`` variant: the
django-tasks backport where Django is 5.2, ``TASKS`` naming everystep's backend, a
``tasks.py``, the worker restarted, a task enqueued from a shell that the worker completes
and ``get_result`` reports ``SUCCESSFUL`` with its return value.
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
        # The stdout of every command that runs code in ``manage.py shell``: the page's
        # commands that schedule a run or enqueue a task, each printing its id.
        self.printed: list[str] = []
        self.written: list[str] = []  # the modules the page wrote, as dotted names

    def sh(self, block: Block, cwd: Path) -> None:
        done = run(["bash", "-euo", "pipefail", "-c", block.code], cwd=cwd, env=self.env)
        if "manage.py shell" in block.code:
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

    def has_django_tasks(self) -> bool:
        """Whether the virtualenv's Django ships ``django.tasks`` (Django 6)."""
        found = subprocess.run(
            ["python", "-c", "import django.tasks"], capture_output=True, env=self.env
        )
        return found.returncode == 0

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


def test_the_page_follows_a_task_variant_with_the_worker_restarted():
    """The @task variant is marked for this tier: the backport for Django 5.2, TASKS naming
    everystep's backend, a tasks module with a @task calling a @step, a worker restarted
    after them, a task enqueued from a shell, and get_result in a shell block."""
    page = blocks()
    actions = [b.action for b in page]
    tasks_at = next(i for i, b in enumerate(page) if "everystep.tasks.EverystepBackend" in b.code)
    assert page[tasks_at].action == "append" and "TASKS" in page[tasks_at].code
    backport = actions.index("backport")
    assert backport < tasks_at and "pip install django-tasks" in page[backport].code
    module = next(b for b in page if b.action == "write" and b.target == "orders/tasks.py")
    assert "@task" in module.code and "@step" in module.code
    restart = len(actions) - 1 - actions[::-1].index("worker")
    assert actions.count("worker") == 2 and tasks_at < restart
    later = page[restart + 1 :]
    assert any(b.action == "run" and ".enqueue(" in b.code for b in later)
    assert any(b.action == "shell" and ".get_result(" in b.code for b in later)


def test_the_quickstart_runs_from_the_built_wheel(venv: Path, tmp_path: Path):
    """Following docs/quickstart.md in a new project with the wheel, each command that
    schedules a run or enqueues a task prints its id alone, a worker completes those runs
    and logs them, the page's Python blocks pass in a shell beside the worker each time
    they run, each worker exits 0 on SIGTERM (the page restarts it once, for TASKS), and
    get_result reports the enqueued task SUCCESSFUL with its return value, run by the
    worker."""
    user = Quickstart(venv, tmp_path)
    page = blocks()
    worker: subprocess.Popen[bytes] | None = None
    logs: list[Path] = []
    shells = 0
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
            elif block.action in ("run", "backport"):
                assert user.project is not None, "a command before the project exists"
                if block.action == "run" or not user.has_django_tasks():
                    user.sh(block, user.project)
            else:
                if worker is not None:
                    _stop_worker(worker, logs[-1])
                logs.append(tmp_path / f"worker-{len(logs)}.log")
                worker = _start_worker(user, block, logs[-1])
                _wait_for_final_runs(user, worker, logs[-1])
        assert worker is not None
        _wait_for_final_runs(user, worker, logs[-1])
        _stop_worker(worker, logs[-1])
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()

    scheduled = UUID.findall("".join(user.printed))
    assert len(scheduled) == 2, "the page schedules a run and enqueues a task from a shell"
    assert _printed_ids_alone(user.printed), user.printed
    assert shells, "the page has no Python block for the shell beside the worker"

    runs = {r["id"]: r for r in user.runs()}
    assert set(scheduled) <= set(runs)
    output = "".join(log.read_text() for log in logs)
    for run_id in scheduled:
        summary = runs[run_id]
        assert summary["status"] == "completed", (summary, output)
        assert f"run {run_id} ({summary['name']}) completed" in output, output
    # The shell blocks' runs (their own asserts checked them): completed, or stopped by
    # Terminal as the page says; never left unfinished or failed.
    assert {r["status"] for r in runs.values()} <= {"completed", "stopped"}, runs

    task_id = scheduled[-1]
    assert runs[task_id]["name"] == "orders.tasks.ship"
    read = (
        "from orders.tasks import ship\n"
        f"r = ship.get_result({task_id!r})\n"
        "print(json.dumps([r.status, r.return_value, r.worker_ids]))\n"
    )
    status, value, worker_ids = json.loads(
        user.manage("shell", "-v", "0", "-c", "import json\n" + read)
    )
    assert (status, value) == ("SUCCESSFUL", "parcel-7 shipped")
    assert len(worker_ids) == 1 and worker_ids[0] in logs[-1].read_text(), worker_ids


def _stop_worker(worker: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, as Ctrl-C or a process manager stops it: the worker drains and exits 0."""
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0, log.read_text()


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
    return all(UUID.fullmatch(out.strip()) for out in printed)


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
