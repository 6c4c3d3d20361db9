"""The Python examples in the documentation run, and do what the text says.

How examples are found and run (docs/contributing.md says the same for writers):

- Every fenced block opened with ```python in ``docs/**/*.md`` and in ``README.md`` is an
  example. The examples of one page run in order, in one namespace: a module named
  ``docs_examples_<page>`` (``docs/running/workers.md`` -> ``docs_examples_running_workers``)
  that is put in ``sys.modules`` while the page runs, so ``@workflow`` and ``@step``
  functions defined there get stable names (module.qualname) and recorded exceptions of
  classes defined there can be rebuilt on replay.
- A block preceded by an HTML comment ``<!-- fragment: why -->`` (blank lines may sit in
  between) is a fragment and is not run: a settings excerpt, code that needs your own
  models, a worker process or the runner image. The comment is invisible on the site.
- Django is set up with ``tests/settings.py`` (SQLite unless ``EVERYSTEP_TEST_DB`` says
  otherwise), every page runs in a transactional test database, and the examples drive
  runs with ``everystep.testing.run_due()``, so a page that schedules a workflow can run it
  to its end and assert its result.
- A failing example reports the Markdown file and line (the code is compiled with its
  line numbers in the page).
"""

from __future__ import annotations

import re
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.models.signals import post_save

from everystep.engine.execute import run_pass
from everystep.models import Workflow
from everystep.store.claims import claim_due
from everystep.values import Claim
from tests.markdown import fences
from tests.packaging import quickstart_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)$")
FRAGMENT = re.compile(r"^\s*<!--\s*fragment\b.*-->\s*$")


@dataclass(frozen=True)
class Example:
    """One fenced ```python block: where its code starts, the code, whether it runs."""

    line: int  # 1-based line of the first line of code
    code: str
    runs: bool


def examples(page: Path) -> list[Example]:
    """The ```python blocks of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    for i, end, opening in fences(lines, FENCE):
        indent, info = len(opening["indent"]), opening["info"].strip()
        if info.split(" ")[0] == "python":
            code = "\n".join(line[indent:] for line in lines[i + 1 : end])
            found.append(Example(i + 2, code, not _marked_fragment(lines, i)))
    return found


def _marked_fragment(lines: list[str], fence: int) -> bool:
    """Whether the fence at ``fence`` follows a ``<!-- fragment -->`` comment."""
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    return before >= 0 and FRAGMENT.match(lines[before]) is not None


def module_name(page: Path) -> str:
    """``docs_examples_<page>``: the module the page's examples run as."""
    relative = page.relative_to(ROOT).with_suffix("")
    parts = [p for p in relative.parts if p != "docs"]
    return "docs_examples_" + "_".join(re.sub(r"\W", "_", p) for p in parts).lower()


RUNNABLE = [page for page in PAGES if any(e.runs for e in examples(page))]


def test_the_pages_that_teach_by_example_have_examples_that_run():
    """The quickstart, how-it-works, testing and README pages hold examples that run (a
    page whose blocks were all marked fragments would silently test nothing)."""
    names = {page.relative_to(ROOT).as_posix() for page in RUNNABLE}
    expected = {"README.md", "docs/quickstart.md", "docs/how-it-works.md", "docs/testing.md"}
    assert expected <= names, sorted(names)


def test_fragment_markers_only_precede_python_blocks():
    """A fragment comment that marks nothing (a typo, a moved block) is refused."""
    stray = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if not FRAGMENT.match(line):
                continue
            following = next((ln for ln in lines[number + 1 :] if ln.strip()), "")
            if not following.strip().startswith("```python"):
                stray.append(f"{page.relative_to(ROOT)}:{number + 1}")
    assert not stray


def test_readme_links_into_the_docs_resolve():
    """Every relative link of the README names a file that exists, and a heading of it
    where it has an anchor (mkdocs checks the links inside docs/, not the README's)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)#:]+)(?:#([^)]+))?\)", readme):
        path, anchor = ROOT / target[0], target[1]
        if not path.is_file():
            broken.append(target[0])
        elif anchor and anchor not in _anchors(path):
            broken.append(f"{target[0]}#{anchor}")
    assert not broken


def _anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives the headings of ``page``."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_examples_run(page: Path):
    """Every runnable example of the page runs, in order, without error (their own
    asserts check what the text claims)."""
    run_examples(page)


@dataclass
class LateWorker:
    """Stands for the worker the quickstart starts: it claims each run the moment it is
    scheduled, before the example's own ``run_due()`` can, and ends it a moment later,
    in a thread of its own, after ``run_due()`` has found nothing to do."""

    runner: str = "quickstart-worker"
    threads: list[threading.Thread] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def claim(self, sender: Any, instance: Workflow, created: bool, **kwargs: Any) -> None:
        if not created:
            return
        for claim in claim_due(self.runner, 100):
            thread = threading.Thread(target=self._finish, args=(claim,))
            thread.start()
            self.threads.append(thread)

    def _finish(self, claim: Claim) -> None:
        try:
            # The example reads the run meanwhile: a wait, not an assertion on time.
            time.sleep(0.5)
            run_pass(claim)
            self.ran.append(str(claim.run_id))
        finally:
            connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_quickstart_run_it_examples_pass_when_the_worker_runs_their_runs():
    """The quickstart's examples for a shell beside the worker (marked ``shell``) pass
    when the worker claims their runs first and ends them later: they wait for each
    run's end; reading its status right after ``run_due()`` failed one try in two."""
    page = ROOT / "docs" / "quickstart.md"
    shells = {b.code.strip() for b in quickstart_page.blocks(page) if b.action == "shell"}
    runnable = {e.code.strip() for e in examples(page) if e.runs}
    assert shells and shells <= runnable
    worker = LateWorker()
    post_save.connect(worker.claim, sender=Workflow)
    try:
        run_examples(page)
    finally:
        post_save.disconnect(worker.claim, sender=Workflow)
        for thread in worker.threads:
            thread.join()
    assert len(worker.ran) == 3  # the order, the one stopped by Terminal, the @task


def run_examples(page: Path) -> None:
    """The page's runnable examples, in order, in the page's own module."""
    name = module_name(page)
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module
    try:
        for example in examples(page):
            if example.runs:
                padded = "\n" * (example.line - 1) + example.code
                exec(compile(padded, str(page), "exec"), module.__dict__)
    finally:
        del sys.modules[name]
