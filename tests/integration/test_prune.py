"""Pruning by batch (``everystep.store.prune``): what a batch deletes with its runs, each
row once, and where the next batch starts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from everystep import conf
from everystep.models import AuditEntry, Event, Published, RunWait, Step, Workflow
from everystep.store.prune import prune_batch

pytestmark = pytest.mark.django_db(transaction=True)


def old_run(name: str = "tests.prune", days: float = 40, **fields: object) -> Workflow:
    """A completed run with one step, completed ``days`` days ago."""
    run = Workflow.objects.create(name=name, status="completed", args=[], **fields)
    now = timezone.now()
    Step.objects.create(
        workflow=run, step_id="1", name="s", status="done", started_at=now, finished_at=now
    )
    Workflow.objects.filter(id=run.id).update(completed_at=now - timedelta(days=days))
    run.refresh_from_db()
    return run


def test_a_batch_deletes_what_belongs_to_its_runs_and_unlinks_their_children():
    """Steps, events, waits, published values and the runs' own audit entries go with the
    runs; a child or a fork kept by the prune stays, its link to the pruned run cleared."""
    pruned, other = old_run(), old_run()
    Event.objects.create(workflow=pruned, name="approved", payload=None)
    RunWait.objects.create(waiter=other, awaited_run=pruned)
    Published.objects.create(workflow=pruned, key="k", value=1, updated_at=timezone.now())
    AuditEntry.objects.create(action="cancel", actor="a", via="ui", run=pruned)
    child = Workflow.objects.create(name="tests.child", status="running", args=[], parent=pruned)
    fork = Workflow.objects.create(
        name="tests.prune", status="scheduled", args=[], forked_from=pruned
    )
    cutoff = timezone.now() - timedelta(days=30)

    assert prune_batch(cutoff, ["completed"], 1)[:2] == (1, 1)

    assert not Workflow.objects.filter(id=pruned.id).exists()
    assert not Event.objects.exists() and not Published.objects.exists()
    assert not RunWait.objects.exists() and not AuditEntry.objects.exists()
    assert Step.objects.filter(workflow=other).count() == 1
    child.refresh_from_db()
    fork.refresh_from_db()
    assert child.parent_id is None and fork.forked_from_id is None


def test_a_batch_reads_ids_only_and_deletes_each_table_once():
    """One batch of 20 runs: one read of their ids, one DELETE per relation that
    references the runs (the steps once), one DELETE of the runs; no run row read whole."""
    for _ in range(20):
        old_run()
    cutoff = timezone.now() - timedelta(days=30)
    connection = connections[conf.database()]
    with CaptureQueriesContext(connection) as queries:
        assert prune_batch(cutoff, ["completed"], 20)[:2] == (20, 20)
    statements = [q["sql"] for q in queries.captured_queries]
    deletes = [sql for sql in statements if sql.lstrip().upper().startswith("DELETE")]
    tables = [sql.split("FROM", 1)[1].split()[0].strip('"`') for sql in deletes]
    cascades = [r for r in Workflow._meta.related_objects if r.on_delete.__name__ == "CASCADE"]
    assert len(deletes) == len(cascades) + 1, statements  # one per relation, then the runs
    assert tables.count(Step._meta.db_table) == 1
    assert tables[-1] == Workflow._meta.db_table
    selects = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1, selects
    assert '"name"' not in selects[0] and "`name`" not in selects[0], selects[0]


def test_the_next_batch_starts_after_the_last_one():
    """Batches walk the runs by completion time, oldest first, each past where the last
    stopped: a run kept by the prune before that point is not read again."""
    later, first = old_run(days=35), old_run(days=45)
    cutoff = timezone.now() - timedelta(days=30)
    place = (first.completed_at, first.id)
    assert prune_batch(cutoff, ["completed"], 1) == (1, 1, place)
    assert prune_batch(cutoff, ["completed"], 1, after=(later.completed_at, later.id)) == (
        0,
        0,
        None,
    )
    assert prune_batch(cutoff, ["completed"], 1, after=place) == (
        1,
        1,
        (later.completed_at, later.id),
    )


@pytest.mark.backends("postgres")
def test_the_last_call_reads_no_run_completed_after_the_cutoff():
    """With every old run pruned, the call that finds nothing left is one index probe: its
    plan reads by completion time, not every run since (PostgreSQL's EXPLAIN)."""
    now = timezone.now()
    Workflow.objects.bulk_create(
        Workflow(name="tests.fresh", status="completed", args=[], completed_at=now)
        for _ in range(2000)
    )
    with connections[conf.database()].cursor() as cursor:
        cursor.execute("ANALYZE everystep_workflow")
    cutoff = timezone.now() - timedelta(days=30)
    due = Workflow.objects.filter(status__in=["completed"], completed_at__lt=cutoff)
    plan = due.order_by("completed_at", "id").values_list("id")[:100].explain()
    assert "everystep_wf_completed" in plan, plan
