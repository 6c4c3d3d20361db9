"""The public API is typed for type checkers (issue 55): a project that uses it
(``tests/typecheck/example/``) passes pyright in strict mode and ``mypy --strict``, and
each mistake of ``tests/typecheck/bad/`` (a line ending ``# expect-error``) is reported
by both at its line, and nothing else is. The checkers run as subprocesses, once each;
one that is not installed fails the tests (both are in the ``dev`` extra)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "typecheck"
FOLDERS = ("tests/typecheck/example", "tests/typecheck/bad")
MARK = "# expect-error"

# Lines per file (relative to the repository) that a checker reported errors at.
Reported = dict[str, set[int]]


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def sources(folder: str) -> list[Path]:
    return sorted((PROJECT / folder).glob("*.py"))


def marked() -> Reported:
    """The lines each snippet of ``bad/`` marks as a mistake."""
    return {
        relative(path): {
            number
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if line.rstrip().endswith(MARK)
        }
        for path in sources("bad")
        if path.name != "__init__.py"
    }


def checker_env() -> dict[str, str]:
    """The environment, without settings that would change what a checker reads (a
    pyright version to download, a mypy path or cache of the developer's)."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYRIGHT_PYTHON_", "MYPY"))
    }


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``python -m <arguments>`` in the repository, as this test's interpreter."""
    return subprocess.run(
        [sys.executable, "-m", *arguments],
        cwd=ROOT,
        env=checker_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_pyright() -> tuple[Reported, int]:
    config = str(PROJECT / "pyrightconfig.json")
    proc = run("pyright", "--outputjson", "--pythonpath", sys.executable, "--project", config)
    # 0: no errors, 1: errors reported (or no pyright: then no report either).
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    reported: Reported = {}
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] in ("error", "warning"):
            lines = reported.setdefault(relative(Path(diagnostic["file"])), set())
            lines.add(diagnostic["range"]["start"]["line"] + 1)
    return reported, report["summary"]["filesAnalyzed"]


def run_mypy(cache: Path) -> tuple[Reported, int]:
    config = str(PROJECT / "mypy.ini")
    proc = run("mypy", "--config-file", config, "--cache-dir", str(cache), *FOLDERS)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    reported: Reported = {}
    for path, line in re.findall(r"^(.+?):(\d+): error:", proc.stdout, re.MULTILINE):
        reported.setdefault(relative(ROOT / path), set()).add(int(line))
    checked = re.search(r"\b(?:in|checked) (\d+) source files?\b", proc.stdout)
    assert checked, proc.stdout + proc.stderr
    return reported, int(checked.group(1))


@pytest.fixture(scope="module", params=["pyright", "mypy"])
def reported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Reported:
    """What one checker reports over the example and the snippets, once it is known to
    have read every file of both."""
    if request.param == "pyright":
        errors, files = run_pyright()
    else:
        errors, files = run_mypy(tmp_path_factory.mktemp("mypy-cache"))
    assert files == len(sources("example")) + len(sources("bad")), f"{request.param} read {files}"
    return errors


def test_every_snippet_marks_a_mistake() -> None:
    """Each snippet of ``bad/`` marks at least one line, so none passes by being empty."""
    snippets = marked()
    assert snippets, "no snippets in tests/typecheck/bad"
    assert all(snippets.values()), snippets


def test_the_example_passes(reported: Reported) -> None:
    """The example project has no error and no warning: every ``assert_type`` holds."""
    example = {path: lines for path, lines in reported.items() if "/example/" in path}
    assert example == {}


def test_each_mistake_is_reported_at_its_line(reported: Reported) -> None:
    """Each marked line of ``bad/`` has an error, and no other line of them has one."""
    bad = {path: lines for path, lines in reported.items() if "/bad/" in path}
    assert bad == marked()


def test_workflow_is_generic_for_checkers_only() -> None:
    """``Workflow[int]`` is ``Workflow`` at run time, and Django still renders the models'
    migration state, which a ``typing.Generic`` among the model's bases makes raise."""
    from django.apps import apps
    from django.db.migrations.state import ProjectState

    from everystep.models import Workflow

    assert Workflow[int] is Workflow
    rendered = ProjectState.from_apps(apps).apps.get_model("everystep", "Workflow")
    assert rendered._meta.db_table == Workflow._meta.db_table
