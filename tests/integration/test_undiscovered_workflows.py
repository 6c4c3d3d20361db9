"""Workflows no worker would import (issue 33), in the test process on every database: one
is scheduled with a warning in tests (outside tests it is refused:
tests/acceptance/test_undiscovered_workflows_worker.py), one that workers import is not; and
``result()`` inside a test's transaction says to call ``run_due()`` first."""

from __future__ import annotations

import warnings

import pytest
from django.test import TestCase

import everystep
from everystep import schedule, start, workflow
from everystep.errors import EverystepError, WorkflowNotDiscoveredWarning
from everystep.models import Workflow
from everystep.testing import run_due
from tests.testapp import chaos
from tests.testapp import composition as cw
from tests.testapp import workflows as wf

NOT_DISCOVERED = (
    "cannot {verb} workflow tests.integration.test_undiscovered_workflows.tripled: it is "
    "defined in module 'tests.integration.test_undiscovered_workflows', which workers do not "
    'import, so a worker would fail the run with "unknown workflow". Define it in an '
    "installed app's workflows.py (or import it from there), or add "
    "'tests.integration.test_undiscovered_workflows' to the setting EVERYSTEP_WORKFLOW_MODULES "
    "(a warning in tests: everystep.testing.run_due() runs it in this process)"
)
IN_A_TEST = (
    "result() cannot wait inside a transaction, and this test runs inside one (a TestCase, "
    "or pytest's django_db without transaction=True) that no worker can see into: in a "
    "TestCase call everystep.testing.run_due() first, which runs the due runs in the test, "
    "and result() then returns at once"
)


@workflow
def tripled(n: int) -> int:
    return 3 * n


@workflow
def starts_tripled(n: int) -> int:
    return everystep.result(start(tripled, n))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verb", ["schedule", "start"])
def test_a_workflow_of_a_test_module_is_scheduled_with_a_warning_naming_the_fixes(verb: str):
    """schedule()/start() of a workflow defined in a test module warns (the message the
    same call raises outside tests), pointing at the caller's line; the run is written
    and run_due() runs it."""
    with pytest.warns(WorkflowNotDiscoveredWarning) as caught:
        run = getattr(everystep, verb)(tripled, 5)
    assert [str(warning.message) for warning in caught] == [NOT_DISCOVERED.format(verb=verb)]
    assert caught[0].filename == __file__
    run_due()
    assert Workflow.objects.get(id=run.id).status == "completed"
    assert everystep.result(run) == 15


@pytest.mark.django_db(transaction=True)
def test_a_child_of_a_test_module_is_started_from_a_body_with_a_warning():
    """start() inside a body of a workflow no worker imports warns too, and the child runs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parent = schedule(starts_tripled, 2)
        run_due()
    messages = [str(w.message) for w in caught if w.category is WorkflowNotDiscoveredWarning]
    assert NOT_DISCOVERED.format(verb="start") in messages
    assert everystep.result(parent) == 6


@pytest.mark.django_db(transaction=True)
def test_workflows_that_workers_import_are_scheduled_without_a_warning():
    """A workflow of an app's workflows module, and one imported by an app's ready() after
    everystep's autodiscovery (tests.testapp.chaos), are scheduled without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkflowNotDiscoveredWarning)
        runs = [schedule(wf.sequential, 1, 2), schedule(chaos.sequential, 1, 0)]
    assert Workflow.objects.filter(id__in=[run.id for run in runs]).count() == 2


@pytest.mark.django_db
def test_result_in_a_test_transaction_says_to_call_run_due_first():
    """result() of an unfinished run inside pytest's django_db transaction raises naming
    the case and run_due(); after run_due() it returns the result."""
    run = schedule(cw.child_sum, 2, 3)
    with pytest.raises(EverystepError) as caught:
        everystep.result(run)
    assert str(caught.value) == IN_A_TEST
    run_due()
    assert everystep.result(run) == 5


class ResultInATestCase(TestCase):
    def test_result_without_run_due_names_the_testcase(self) -> None:
        """result() of an unfinished run in a Django TestCase raises naming the TestCase and
        run_due(); gather() too; after run_due() both return."""
        run = schedule(cw.child_sum, 1, 1)
        with self.assertRaisesMessage(EverystepError, IN_A_TEST):
            everystep.result(run)
        with self.assertRaisesMessage(EverystepError, "in a TestCase call everystep.testing"):
            everystep.gather([run])
        run_due()
        self.assertEqual(everystep.result(run), 2)
        self.assertEqual(everystep.gather([run]), [2])
