"""What a task run's name can make a process import and run (security issue 50, item 2):
nothing. A name resolves only to a ``@task`` an everystep backend validated in this
process, read from its module's ``__dict__``; a module outside what start-up imported is
not imported for it, a module ``__getattr__`` is not called, and the run fails once with
a reason. Real worker subprocesses: tests/acceptance/test_task_names_worker.py."""

from __future__ import annotations

import sys

import pytest
from django.test import override_settings

from everystep import registry, task_runs
from everystep.errors import EverystepError
from everystep.models import Status, Workflow
from everystep.store.runs import create_run
from everystep.testing import run_due
from tests.testapp import import_marks, tasks

try:  # Django 6
    from django.tasks import TaskResultStatus
    from django.tasks import task as django_task
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus  # type: ignore[no-redef]
    from django_tasks import task as django_task  # type: ignore[no-redef]

pytestmark = pytest.mark.django_db(transaction=True)

HOW_TO_KNOW = "every installed app's tasks.py and workflows.py"

# Each name, the modules that must stay unimported, and what the failure says.
TRAPS = [
    pytest.param(
        "django.contrib.humanize.templatetags.humanize.intcomma",
        ["django.contrib.humanize.templatetags.humanize"],
        "module 'django.contrib.humanize.templatetags.humanize' is not imported",
        id="a django module an installed contrib app made importable",
    ),
    pytest.param(
        "django.core.management.call_command",
        [],
        "'django.core.management.call_command' is a function, not a django.tasks Task",
        id="a function of an imported django module",
    ),
    pytest.param(
        "tests.testapp.site.wsgi.application",
        ["tests.testapp.site.wsgi"],
        "module 'tests.testapp.site.wsgi' is not imported",
        id="the settings package's wsgi",
    ),
    pytest.param(
        "tests.testapp.unloaded_workflows.sneaky",
        ["tests.testapp.unloaded_workflows"],
        "module 'tests.testapp.unloaded_workflows' is not imported",
        id="a module registering a workflow on import",
    ),
    pytest.param(
        "tests.testapp.unloaded_tasks.forgotten",
        ["tests.testapp.unloaded_tasks"],
        "module 'tests.testapp.unloaded_tasks' is not imported",
        id="a real task in a module start-up did not import",
    ),
    pytest.param(
        "tests.testapp.exits_on_import.job",
        ["tests.testapp.exits_on_import"],
        "module 'tests.testapp.exits_on_import' is not imported",
        id="a module raising SystemExit on import",
    ),
]


@pytest.mark.parametrize(("name", "unimported", "reason"), TRAPS)
def test_a_task_run_name_imports_nothing_and_fails_once(
    name: str, unimported: list[str], reason: str
) -> None:
    """The run fails once with the reason and how to make a task known; no module is
    imported, no workflow registered; a real task still runs afterwards."""
    run = create_run(name, [[1], {}], None, queue="default")
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert reason in row.error["message"]
    assert not set(unimported) & set(sys.modules), "nothing imported for the name"
    assert registry.lookup("unloaded.sneaky") is None, "no workflow registered by an import"
    assert run_due() == [], "failed once, not retried"
    ok = tasks.add.enqueue(2, 3)
    run_due()
    assert tasks.add.get_result(ok.id).status == TaskResultStatus.SUCCESSFUL


def test_the_reason_says_how_to_make_a_task_known() -> None:
    """A name outside what start-up imported points at tasks.py, workflows.py and the
    setting."""
    with pytest.raises(EverystepError) as raised:
        task_runs.task_named("tests.testapp.unloaded_tasks.forgotten")
    assert HOW_TO_KNOW in str(raised.value)
    assert "EVERYSTEP_WORKFLOW_MODULES" in str(raised.value)
    assert "tests.testapp.unloaded_tasks" not in sys.modules


def test_a_module_getattr_is_not_called_for_a_name() -> None:
    """A name a loaded module does not define is read from its ``__dict__``: its module
    ``__getattr__`` (which imports another module) does not run."""
    import tests.testapp.lazy_attributes  # noqa: F401  (loaded, as an app's module may be)

    marked = list(import_marks.MARKED)
    run = create_run("tests.testapp.lazy_attributes.anything", [[], {}], None, queue="default")
    run_due()
    row = Workflow.objects.get(id=run.id)
    assert row.status == Status.FAILED
    assert "'tests.testapp.lazy_attributes.anything' is nothing" in row.error["message"]
    assert "tests.testapp.lazy_target" not in sys.modules
    assert marked == import_marks.MARKED, "no module code ran"


def test_tasks_defined_for_everystep_are_registered_and_others_are_not() -> None:
    """``EverystepBackend.validate_task`` records a task as Django defines it; a
    ``.using()`` copy keeps the module's task; another backend's task is not recorded."""
    assert registry.registered_task("tests.testapp.tasks.add") is tasks.add
    tasks.add.using(queue_name="emails")
    assert registry.registered_task("tests.testapp.tasks.add") is tasks.add
    dummy = ("django.tasks" if "django.tasks" in sys.modules else "django_tasks") + (
        ".backends.dummy.DummyBackend"
    )
    with override_settings(TASKS={"default": {"BACKEND": dummy}}):
        other = django_task(_elsewhere)
    assert other.module_path == f"{__name__}._elsewhere"
    assert registry.registered_task(other.module_path) is None


def test_a_task_of_a_module_imported_after_start_up_is_known_to_that_process() -> None:
    """A module the process itself imports later (a view's import) registers its tasks:
    its runs run in that process; the worker's start-up is what makes them known there."""
    import tests.testapp.killer_tasks as killer

    assert task_runs.task_named("tests.testapp.killer_tasks.kill_worker") is killer.kill_worker


def _elsewhere() -> None:
    """A function made a task of another backend in a test."""
