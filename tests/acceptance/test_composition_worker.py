"""Child runs and waits for runs with real worker processes: a waiting parent holds no
slot, children spread over every worker, and a worker killed in the middle of a parent
never makes it start a child twice."""

from __future__ import annotations

import signal

import pytest

from everystep import schedule, send
from everystep.models import Step, Workflow
from tests.acceptance.conftest import wait_until
from tests.testapp import composition as cw
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

FAST = ("--poll", "0.1")


def row(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def children(run: Workflow) -> list[Workflow]:
    return list(Workflow.objects.filter(parent_id=run.id))


def test_a_waiting_parent_holds_no_slot(workers):
    """Pool 2: two parents wait for children that wait for an event; meanwhile other
    runs complete on the same worker; the event ends the children, then the parents."""
    parents = [schedule(cw.parent_catches, "waits") for _ in range(2)]
    proc = workers("pool2", "--pool", "2", *FAST)
    wait_until(
        lambda: all(row(p).waiting_for and row(p).waiting_for.startswith("run ") for p in parents),
        60,
        "both parents to wait for their children",
    )
    others = [schedule(cw.child_sum, i, 0) for i in range(4)]
    wait_until(lambda: all(row(r).status == "completed" for r in others), 60, "the other runs")
    assert all(row(p).status == "scheduled" for p in parents), "the parents still wait"
    for parent in parents:
        (child,) = children(parent)
        send(child.id, "go", "ok")
    wait_until(lambda: all(row(p).status == "completed" for p in parents), 60, "the parents")
    assert [row(p).result for p in parents] == ["value 'ok'", "value 'ok'"]
    for parent in parents:
        assert Execution.objects.filter(run_id=parent.id, step="pass").count() == 2
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_children_spread_over_every_worker_and_the_parent_resumes_once(workers):
    """40 children of 0.3 s each, pool 4 per worker: one worker alone would take 3 s,
    so every worker polling (0.1 s) takes some."""
    procs = [workers(f"fleet-{i}", "--pool", "4", *FAST) for i in range(3)]
    parent = schedule(cw.parent_fanout, 40, 0.3)
    wait_until(lambda: row(parent).status == "completed", 120, "the parent")
    assert row(parent).result == list(range(40))
    assert len(children(parent)) == 40
    assert Execution.objects.filter(run_id=parent.id, step="pass").count() == 2
    paused = Execution.objects.filter(step="pause")
    assert paused.count() == 40
    assert len(set(paused.values_list("pid", flat=True))) == 3, "children ran on every worker"
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0


def test_a_worker_killed_mid_parent_never_starts_a_child_twice(workers):
    parent = schedule(cw.parent_slow, 8, 0.4)
    first = workers("kill-me", *FAST)
    wait_until(lambda: len(children(parent)) >= 3, 60, "some children to start")
    first.signal(signal.SIGKILL)
    first.wait(30)
    started_before = len(children(parent))
    second = workers("kill-me", *FAST)  # same name: the killed pass is resumed at once
    wait_until(lambda: row(parent).status == "completed", 120, "the parent")
    assert row(parent).result == [i + 1 for i in range(8)]
    assert len(children(parent)) == 8, f"{started_before} started before the kill, 8 in all"
    starts = Step.objects.filter(workflow=parent, name="everystep.start")
    assert starts.count() == 8
    assert {s.result["run"] for s in starts} == {str(c.id) for c in children(parent)}
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
