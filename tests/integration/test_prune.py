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


def old_run(name: str = "tests.prune", **fields: object) -> Workflow:
    """A completed run with one step, completed 40 days ago."""
    run = Workflow.objects.create(name=name, status="completed", args=[], **fields)
    now = timezone.now()
    Step.objects.create(
        workflow=run, step_id="1", name="s", status="done", started_at=now, finished_at=now
    )
    Workflow.objects.filter(id=run.id).update(completed_at=now - timedelta(days=40))
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

    assert prune_batch(cutoff, ["completed"], 1) == (1, 1, pruned.id)

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
    """Given where the last batch stopped, a batch never reads back past it: runs the
    prune keeps before that point are not read again."""
    first, second = old_run(), old_run()
    cutoff = timezone.now() - timedelta(days=30)
    assert prune_batch(cutoff, ["completed"], 1) == (1, 1, first.id)
    assert prune_batch(cutoff, ["completed"], 1, after=second.id) == (0, 0, None)
    assert prune_batch(cutoff, ["completed"], 1, after=first.id) == (1, 1, second.id)
