"""Typed values through a real worker process killed mid-run (issue 55): a dataclass, a
pydantic model, a list of models and an Enum through steps, a ``parallel()`` fork, a
child's ``result()``, an event and a published value. The body logs the types it was
handed on each pass; the pass after the SIGKILL and restart is handed the same ones, no
step body runs twice, and ``result()`` here rebuilds the workflow's annotated type."""

from __future__ import annotations

import signal
from decimal import Decimal
from pathlib import Path

import pytest

import everystep
from everystep.models import Status, Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import typed_values as tv
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True)]

FAST = ("--poll", "0.05")
SEEN = "Order|list[LineItem]|Priority|Money|Point|Money|Transfer"


def test_a_killed_worker_resumes_a_run_handing_its_body_the_same_types(workers, tmp_path: Path):
    gate = tmp_path / "gate"
    run = everystep.schedule(tv.typed_order, "k1", str(gate))
    everystep.send(run.id, "paid", tv.Transfer("transfer", "DE00 1234"))
    first = workers("typed", *FAST)
    wait_until(
        lambda: Execution.objects.filter(step="k1:second").exists(), 60, "the run to reach its gate"
    )
    first.signal(signal.SIGKILL)
    first.wait(30)
    assert tv.types_seen(run.id) == [SEEN]
    recorded = set(Step.objects.filter(workflow_id=run.id).values_list("step_id", flat=True))
    gate.touch()
    again = workers("typed", *FAST)
    wait_until(
        lambda: Workflow.objects.get(id=run.id).status == Status.COMPLETED,
        60,
        "the run to finish after the restart",
    )
    assert tv.types_seen(run.id) == [SEEN, SEEN], "the same types after the SIGKILL and resume"
    for label in ("make_order", "price_lines", "priority_of", "summary_of", "corner"):
        assert Execution.objects.filter(step=f"k1:{label}").count() == 1, label
    assert Execution.objects.filter(step="doubled").count() == 1, "the child's step ran once"
    steps = list(Step.objects.filter(workflow_id=run.id).values_list("step_id", flat=True))
    assert len(steps) == len(set(steps)) and recorded <= set(steps), "no step recorded twice"
    quote = everystep.result(run, timeout=10)
    assert isinstance(quote, tv.Quote)
    assert quote.total == Decimal("12.50") and quote.paid_by == "DE00 1234"
    assert isinstance(quote.lines[0], tv.LineItem)
    assert everystep.published(run)["order"]["ref"] == "k1", "published as its JSON form"
    order = everystep.published(run, types={"order": tv.Order})["order"]
    assert isinstance(order, tv.Order) and order.total == tv.Money(Decimal("12.50"))
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0
