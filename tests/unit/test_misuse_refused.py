"""Mistakes of a first day with everystep (issue 33) that used to surface as an obscure
``TypeError``/``AttributeError`` or a failed run later are refused at once, saying what
works: a django.tasks ``@task`` under ``@workflow``/``@step`` or over ``@workflow``,
keyword arguments to ``schedule()``/``start()``, a bad ``EVERYSTEP_WORKFLOW_MODULES``.
No database: each of these is refused before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core import mail
from django.test.utils import setup_test_environment, teardown_test_environment

from everystep import conf, registry, schedule, start, step, workflow
from everystep.checks import check_settings
from tests.testapp import chaos
from tests.testapp import workflows as wf


def _task_decorators() -> list[tuple[str, Callable[..., Any]]]:
    """Django's own ``task`` (Django 6) and the backport's (django-tasks, in the dev extra),
    whichever are installed."""
    found = []
    try:
        from django.tasks import task as django_task

        found.append(("django.tasks", django_task))
    except ImportError:  # Django 5.2
        pass
    from django_tasks import task as backport_task

    found.append(("django_tasks", backport_task))
    return found


TASKS = _task_decorators()


def charge(order_id: int) -> int:
    """A plain module-level function: what ``@task`` accepts."""
    return order_id


@workflow
def fulfil(order_id: int, amount: int = 0) -> int:
    return order_id + amount


@pytest.mark.parametrize(("_", "task"), TASKS, ids=[name for name, _ in TASKS])
@pytest.mark.parametrize(
    "decorator", [workflow, workflow(name="first-day.charge"), step, step(atomic=True)]
)
def test_workflow_or_step_over_a_django_task_is_a_clear_type_error(
    _: str, task: Callable[..., Any], decorator: Callable[..., Any]
):
    """@workflow or @step stacked on a django.tasks @task is a TypeError at decoration
    that names the task and says what works, not an AttributeError on ``__qualname__``."""
    task_object = task(charge)
    with pytest.raises(TypeError) as caught:
        decorator(task_object)
    message = str(caught.value)
    assert "cannot decorate tests.unit.test_misuse_refused.charge, a django.tasks @task" in message
    assert "@workflow (with @step functions it calls), started by everystep.schedule()" in message
    assert "with TASKS naming everystep.tasks.EverystepBackend, the task function" in message
    assert registry.lookup("first-day.charge") is None


@pytest.mark.parametrize(("_", "task"), TASKS, ids=[name for name, _ in TASKS])
def test_scheduling_a_task_over_a_workflow_says_to_schedule_the_workflow(
    _: str, task: Callable[..., Any]
):
    """schedule() of a @task stacked over a @workflow is a TypeError saying its enqueue()
    records nothing and to schedule the workflow itself."""
    task_object = task(fulfil)
    with pytest.raises(TypeError, match=r"is a django\.tasks @task over a @workflow") as caught:
        schedule(task_object, 1)
    assert "remove @task and schedule the workflow, or remove @workflow" in str(caught.value)


@pytest.mark.parametrize("verb", [schedule, start])
def test_keyword_arguments_are_a_type_error_saying_arguments_are_positional(
    verb: Callable[..., Any],
):
    """schedule()/start() with workflow keyword arguments is a TypeError naming the
    workflow, its parameters and the keywords, saying arguments are positional."""
    with pytest.raises(TypeError) as caught:
        verb(fulfil, 1, order_id=1, amount=2)
    name = verb.__name__
    message = str(caught.value)
    assert message.startswith(
        f"cannot {name} workflow tests.unit.test_misuse_refused.fulfil(order_id, amount=0): "
        "workflow arguments are positional"
    )
    assert "got keyword arguments amount, order_id" in message
    assert "pass the values in the order of the parameters" in message


def test_a_misspelt_option_of_schedule_lists_its_own_keywords():
    """A misspelt schedule() option (idempotencykey=) is refused listing schedule()'s own
    keywords, so the typo shows."""
    with pytest.raises(TypeError, match=r"own keywords are at, delay and idempotency_key"):
        schedule(fulfil, 1, idempotencykey="k")


def test_keywords_to_something_not_a_workflow_say_it_is_not_a_workflow():
    """The first thing wrong is reported first: a plain function, with keywords, is
    refused as not a @workflow."""
    with pytest.raises(TypeError, match="is not a @workflow function"):
        schedule(charge, order_id=1)


def test_workflows_registered_while_django_started_are_known_to_workers():
    """A workflow of an app's workflows module, and one imported by an app's ready() after
    everystep's autodiscovery, are known to workers; one of a test module is not."""
    assert registry.known_to_workers(wf.sequential.__everystep_workflow__.name)
    assert registry.known_to_workers(chaos.sequential.__everystep_workflow__.name)
    assert not registry.known_to_workers(fulfil.__everystep_workflow__.name)


def test_the_test_environment_is_told_by_djangos_marker_not_by_a_mail_outbox():
    """in_test_environment() follows setup/teardown_test_environment(); a mail.outbox left
    by the locmem email backend outside tests does not count."""
    assert conf.in_test_environment()
    teardown_test_environment()
    try:
        assert not conf.in_test_environment()
        mail.outbox = []  # what the locmem backend creates in any process sending mail
        assert not conf.in_test_environment()
        del mail.outbox
    finally:
        setup_test_environment()
    assert conf.in_test_environment()


@pytest.mark.parametrize("value", ["late_flows", ["late_flows", 3], [""], {"late_flows": 1}])
def test_an_invalid_workflow_modules_setting_is_a_system_check_error(settings: Any, value: Any):
    """EVERYSTEP_WORKFLOW_MODULES that is not a list of module names is everystep.E009."""
    settings.EVERYSTEP_WORKFLOW_MODULES = value
    errors = [error for error in check_settings() if error.id == "everystep.E009"]
    assert [error.msg for error in errors] == [
        "EVERYSTEP_WORKFLOW_MODULES must be a list of dotted module names, got "
        f"{value!r} (none of them is imported meanwhile)"
    ]


@pytest.mark.parametrize("value", [[], ["tests.testapp.shapes"], ("a.b", "c")])
def test_a_valid_workflow_modules_setting_passes_the_checks(settings: Any, value: Any):
    """A list or tuple of module names (or none) raises no E009."""
    settings.EVERYSTEP_WORKFLOW_MODULES = value
    assert not [error for error in check_settings() if error.id == "everystep.E009"]
