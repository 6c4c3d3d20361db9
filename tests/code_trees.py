"""Projects of their own for tests that need another version of the code than the test
process's: a code tree (``deploy_settings`` over the test settings, plus app
``deployapp``) that real worker and "web" processes are started from. Each tree's code
version is a digest of its own sources (``everystep.code_version``), so two trees are two
versions. ``test_two_code_versions`` says what the old and the new tree hold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from tests.workers import ROOT, running, worker_command, worker_env

SETTINGS = """\
from {base} import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "deployapp"]  # noqa: F405
"""

# Every step body leaves an ``Execution`` row: a body run twice shows as two rows.
FIRST = """\
from everystep import sleep, step, workflow
from tests.testapp.wait_workflows import executed
{patched}

@step
def first(x):
    executed("first")
    return x + 1


@step
def old_second(x):
    executed("old_second")
    return x * 10
"""

OLD_KEPT = """
@workflow(name="deploy.kept")
def kept(x, pause=0):
    z = old_second(first(x))
    if pause:
        sleep(pause)
    return z
"""

NEW_KEPT = """
@step
def new_second(x):
    executed("new_second")
    return x * 100


@workflow(name="deploy.kept")
def kept(x, pause=0):
    y = first(x)
    z = new_second(y) if patched("faster") else old_second(y)
    if pause:
        sleep(pause)
    return z


@workflow(name="deploy.added")
def added(x):
    return first(x) * 2
"""

NEW_TASKS = """\
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def added_task(x):
    return x + 1000
"""


def make_tree(root: Path, *, new: bool, base: str = "tests.settings") -> Path:
    """The old (``new=False``) or new code tree under ``root``; its settings are
    ``base`` plus ``deployapp``."""
    (root / "deployapp").mkdir(parents=True)
    (root / "deploy_settings.py").write_text(SETTINGS.format(base=base))
    (root / "deployapp" / "__init__.py").write_text("")
    workflows = FIRST.format(patched="from everystep import patched" if new else "")
    (root / "deployapp" / "workflows.py").write_text(workflows + (NEW_KEPT if new else OLD_KEPT))
    if new:
        (root / "deployapp" / "tasks.py").write_text(NEW_TASKS)
    return root


def env_of(tree: Path) -> dict[str, str]:
    return {**worker_env(str(tree)), "DJANGO_SETTINGS_MODULE": "deploy_settings"}


def worker(
    tree: Path, name: str, log: Path, *more: str
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A real worker process of ``tree``'s code, polling often, while the block runs."""
    return running(worker_command(name, ["--poll", "0.05", *more]), log, env_of(tree))


def on_code(tree: Path, code: str) -> list[str]:
    """Run ``code`` (which prints a JSON list of run ids) in a process of ``tree``: a
    web process of that version."""
    script = "import django, json\ndjango.setup()\n" + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env_of(tree),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
