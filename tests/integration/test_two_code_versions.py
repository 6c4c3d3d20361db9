"""Two versions of a project's code against one database, as in a rolling deploy: real
worker processes and a real "web" process, each started from its own code tree.

The old tree has workflow ``deploy.kept`` (steps ``first`` then ``old_second``). The new
tree adds workflow ``deploy.added`` and task ``deployapp.tasks.added_task``, and changes
``deploy.kept`` behind ``patched("faster")`` to call ``new_second`` — then sleep, so that
the run becomes due again after a deploy. Neither tree sets ``EVERYSTEP_CODE_VERSION``:
each process works its version out from its tree's sources.
"""

from __future__ import annotations

import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from everystep.models import Runner, Status, Step, Workflow
from everystep.store.carrying import waiting_for_code
from tests.code_trees import make_tree, on_code, wait_until, worker
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(ids: list[str]) -> set[str]:
    return set(Workflow.objects.filter(id__in=ids).values_list("status", flat=True))


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    return make_tree(tmp_path / "old", new=False), make_tree(tmp_path / "new", new=True)


SCHEDULE_NEW = """
from everystep import schedule
from deployapp.tasks import added_task
from deployapp.workflows import added
runs = [schedule(added, n) for n in range(3)]
results = [added_task.enqueue(n) for n in range(2)]
print(json.dumps([str(r.id) for r in runs] + [r.id for r in results]))
"""


def test_an_old_worker_leaves_new_workflows_and_tasks_due_until_a_new_worker_runs_them(
    trees: tuple[Path, Path], tmp_path: Path, client: Any
):
    """Old worker, new web: runs of a workflow and a task the old code lacks stay
    ``scheduled``, visibly (the runners page, ``everystep_runs``, the old worker's log),
    never failed; a new worker completes them."""
    old, new = trees
    with worker(old, "old-1", tmp_path / "old.log"):
        wait_until(lambda: Runner.objects.filter(name="old-1").exists(), "the old worker")
        ids = on_code(new, SCHEDULE_NEW)
        # The old worker polls every 0.05 s: two seconds are forty chances to fail them.
        time.sleep(2)
        assert statuses(ids) == {Status.SCHEDULED}
        assert not Step.objects.filter(workflow_id__in=ids).exists()
        waiting = {w.name: w.count for w in waiting_for_code()}
        assert waiting == {"deploy.added": 3, "deployapp.tasks.added_task": 2}
        client.force_login(staff_user(name="staff"))
        page = client.get(reverse("everystep:runners")).content.decode()
        assert "Due runs no live worker can carry" in page
        assert 'workflow=deploy.added">3</a>' in page
        err = StringIO()
        call_command("everystep_runs", stdout=StringIO(), stderr=err)
        assert "3 due run(s) of deploy.added wait for code no live worker has" in err.getvalue()
        old_row = Runner.objects.get(name="old-1")
        assert "deploy.kept" in old_row.carries and "deploy.added" not in old_row.carries
        with worker(new, "new-1", tmp_path / "new.log"):
            wait_until(lambda: statuses(ids) == {Status.COMPLETED}, "the new worker")
            new_version = Runner.objects.get(name="new-1").code_version
    runs = Workflow.objects.filter(id__in=ids)
    assert new_version != old_row.code_version
    assert set(runs.values_list("code_version", flat=True)) == {new_version}
    assert "failed" not in (tmp_path / "old.log").read_text()


def test_a_run_the_new_code_moved_on_is_handed_back_by_an_old_worker_not_failed(
    trees: tuple[Path, Path], tmp_path: Path
):
    """A run of ``deploy.kept`` passed the patch on a new worker and sleeps; the new
    worker is replaced by an old one before it wakes. The old worker hands it back
    unchanged, never claims it again, and a new worker completes it as the new code
    says."""
    old, new = trees
    [run_id] = on_code(
        new,
        """
        from everystep import schedule
        from deployapp.workflows import kept
        print(json.dumps([str(schedule(kept, 1, 3).id)]))
        """,
    )
    with worker(new, "new-1", tmp_path / "new-1.log"):
        wait_until(
            lambda: (
                Workflow.objects.filter(id=run_id, status=Status.SCHEDULED).exists()
                and Step.objects.filter(workflow_id=run_id, name__endswith="new_second").exists()
            ),
            "the run to sleep",
        )
    new_version = Step.objects.filter(workflow_id=run_id).values_list("code_version", flat=True)
    with worker(old, "old-1", tmp_path / "old.log"):
        wait_until(
            lambda: Workflow.objects.filter(id=run_id).exclude(handed_back_by=None).exists(),
            "the old worker to hand the run back",
        )
        time.sleep(1)  # twenty more polls: it does not take the run again
        run = Workflow.objects.get(id=run_id)
        assert run.status == Status.SCHEDULED and run.error is None
        old_version = Runner.objects.get(name="old-1").code_version
        assert run.handed_back_by == old_version
        assert old_version not in set(new_version)
        assert [w.name for w in waiting_for_code()] == ["deploy.kept"]
        log = (tmp_path / "old.log").read_text()
        assert log.count("handed back unchanged") == 1, log
        with worker(new, "new-2", tmp_path / "new-2.log"):
            wait_until(
                lambda: Workflow.objects.get(id=run_id).status == Status.COMPLETED, "completion"
            )
    run = Workflow.objects.get(id=run_id)
    assert run.result == 200  # first(1) = 2, then new_second: 2 * 100
    assert run.claimed_by is None or run.claimed_by == "new-2"
    # Every step ran once: no record was written twice or by the old code.
    names = list(Step.objects.filter(workflow_id=run_id).values_list("name", flat=True))
    assert not [name for name in names if name.endswith("old_second")]
    assert len(names) == len(set(names))
