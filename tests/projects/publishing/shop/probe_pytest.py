"""The same tests for pytest-django: ``django_db`` (a transaction per test) and
``django_db(transaction=True)``."""

import pytest

import everystep
from everystep.testing import run_due
from shop.workflows import aship, ship


@pytest.mark.parametrize("transaction", [False, True])
@pytest.mark.parametrize("workflow", [ship, aship])
def test_a_workflow_publishes(request, transaction, workflow):
    request.applymarker(pytest.mark.django_db(transaction=transaction))
    request.getfixturevalue("transactional_db" if transaction else "db")
    run = everystep.schedule(workflow, ["tea", "cups"])
    run_due()
    assert everystep.result(run, timeout=0) in (["packed tea", "packed cups"], 7)
    assert everystep.published(run)["stage"] == "done"
