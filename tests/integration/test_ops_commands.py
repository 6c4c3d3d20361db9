"""Operations commands: everystep_prune, everystep_runs and everystep_show."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from everystep.models import FINAL_STATUSES, Step, Workflow
from everystep.store.prune import prune_batch

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("several")]

WF = "tests.testapp.workflows.payment"


def make_run(
    status: str,
    *,
    days_ago: float | None = None,
    steps: int = 0,
    name: str = WF,
    claimed_by: str | None = None,
) -> Workflow:
    """A run row with ``steps`` done steps, completed ``days_ago`` days ago (if given)."""
    run = Workflow.objects.create(name=name, status=status, args=[1], claimed_by=claimed_by)
    now = timezone.now()
    for n in range(1, steps + 1):
        Step.objects.create(
            workflow=run, step_id=str(n), name="s", status="done", started_at=now, finished_at=now
        )
    if days_ago is not None:
        completed_at = now - timedelta(days=days_ago)
        Workflow.objects.filter(id=run.id).update(completed_at=completed_at)
    run.refresh_from_db()
    return run


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def surviving() -> set[object]:
    return set(Workflow.objects.values_list("id", flat=True))


# --- everystep_prune ---------------------------------------------------------------


def test_prune_deletes_only_old_final_runs_and_their_steps():
    """Final runs completed before the cut-off go with their steps; everything else stays."""
    doomed = [make_run(status, days_ago=40, steps=2) for status in sorted(FINAL_STATUSES)]
    kept = [
        make_run("completed", days_ago=1, steps=2),
        make_run("failed", days_ago=29, steps=1),
        make_run("completed", steps=1),  # final but no completed_at: never guessed at
        # Not final: kept however old their completed_at looks.
        *(make_run(status, days_ago=40, steps=2) for status in ("scheduled", "running")),
        make_run("blocked", days_ago=40, steps=2),
    ]
    out = command("everystep_prune", "--older-than", "30")
    assert "deleted 4 run(s) and 8 step(s) in 1 batch(es)" in out
    assert surviving() == {run.id for run in kept}
    assert not Step.objects.filter(workflow_id__in=[run.id for run in doomed]).exists()
    assert Step.objects.count() == 2 + 1 + 1 + 2 + 2 + 2


def test_prune_works_in_several_batches():
    """25 old runs with --batch-size 10 go in three batches of 10, 10 and 5."""
    for _ in range(25):
        make_run("failed", days_ago=10, steps=1)
    young = make_run("failed", days_ago=1, steps=1)
    out = command("everystep_prune", "--older-than", "7", "--batch-size", "10", "-v", "2")
    assert "batch 1: 10 run(s), 10 step(s)" in out
    assert "batch 3: 5 run(s), 5 step(s)" in out
    assert "deleted 25 run(s) and 25 step(s) in 3 batch(es)" in out
    assert surviving() == {young.id}
    assert Step.objects.count() == 1


def test_prune_batch_takes_oldest_ids_first_and_is_bounded():
    """prune_batch deletes at most batch_size runs, completed first first, then (0, 0)."""
    runs = [make_run("completed", days_ago=5, steps=2) for _ in range(5)]
    cutoff = timezone.now() - timedelta(days=2)
    assert prune_batch(cutoff, ["completed"], 3) == (3, 6, (runs[2].completed_at, runs[2].id))
    assert surviving() == {runs[3].id, runs[4].id}
    assert prune_batch(cutoff, ["completed"], 3) == (2, 4, (runs[4].completed_at, runs[4].id))
    assert prune_batch(cutoff, ["completed"], 3) == (0, 0, None)


def test_prune_batch_never_deletes_non_final_statuses():
    """Even asked for them directly, the store refuses to prune non-final runs."""
    runs = [make_run(s, days_ago=5, steps=1) for s in ("scheduled", "running", "blocked")]
    cutoff = timezone.now() - timedelta(days=2)
    assert prune_batch(cutoff, ["scheduled", "running", "blocked"], 10) == (0, 0, None)
    assert surviving() == {run.id for run in runs}


def test_prune_status_narrows_to_some_final_statuses():
    """--status limits the prune to the given final statuses, repeatable or space-separated."""
    completed = make_run("completed", days_ago=40)
    failed = make_run("failed", days_ago=40)
    stopped = make_run("stopped", days_ago=40)
    command("everystep_prune", "--older-than", "30", "--status", "failed")
    assert surviving() == {completed.id, stopped.id}
    command("everystep_prune", "--older-than", "30", "--status", "stopped", "--status", "failed")
    assert surviving() == {completed.id}
    assert failed.id not in surviving()


def test_prune_accepts_fractional_days():
    """--older-than 0.5 is twelve hours: a run finished a day ago goes, one an hour ago stays."""
    make_run("completed", days_ago=1)
    recent = make_run("completed", days_ago=1 / 24)
    command("everystep_prune", "--older-than", "0.5")
    assert surviving() == {recent.id}


def test_prune_dry_run_reports_and_deletes_nothing():
    """--dry-run reports per-status counts and at most 20 example runs, and deletes nothing."""
    old_failed = [make_run("failed", days_ago=40, steps=1) for _ in range(22)]
    make_run("stopped", days_ago=40)
    make_run("completed", days_ago=1)
    make_run("running", days_ago=40)
    before = surviving()
    out = command("everystep_prune", "--older-than", "30", "--dry-run")
    assert "dry run: 23 run(s)" in out
    assert "  failed: 22" in out and "  stopped: 1" in out and "  completed: 0" in out
    examples = [line for line in out.splitlines() if WF in line]
    assert len(examples) == 20
    assert str(old_failed[0].id) in examples[0]
    assert surviving() == before
    assert Step.objects.count() == 22


@pytest.mark.parametrize(
    "args, message",
    [
        (["--older-than", "0"], "positive number of days"),
        (["--older-than", "-3"], "positive number of days"),
        (["--older-than", "nan"], "positive number of days"),
        (["--older-than", "inf"], "positive number of days"),
        (["--older-than", "soon"], "number of days, not 'soon'"),
        (["--older-than", "1e12"], "before year 1"),
        (["--older-than", "30", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--older-than", "30", "--status", "running"], "cannot prune status running"),
        (["--older-than", "30", "--status", "failed", "blocked"], "cannot prune status blocked"),
        (["--older-than", "30", "--status", "bogus"], "only final statuses"),
        ([], "--older-than"),
    ],
)
def test_prune_bad_arguments_are_command_errors(args, message):
    """Bad days, batch sizes and statuses are CommandErrors, and nothing is deleted."""
    run = make_run("completed", days_ago=400)
    with pytest.raises(CommandError, match=message):
        command("everystep_prune", *args)
    assert surviving() == {run.id}


# --- everystep_runs ------------------------------------------------------------------


@pytest.fixture
def listed() -> dict[str, Workflow]:
    """Five runs created in this order (so their UUIDv7 ids increase)."""
    return {
        "a": make_run("completed", days_ago=1, claimed_by="w1"),
        "b": make_run("failed", days_ago=1, claimed_by="w2", name="other.flow"),
        "c": make_run("running", claimed_by="w1"),
        "d": make_run("scheduled"),
        "e": make_run("failed", days_ago=0.5, claimed_by="w1"),
    }


def listed_ids(*args: str) -> list[str]:
    out = command("everystep_runs", *args)
    return [line.split()[0] for line in out.splitlines()[1:]]


def test_runs_lists_newest_first(listed):
    """Without filters every run is listed, newest first, one line each, under a header."""
    out = command("everystep_runs")
    assert out.splitlines()[0].split() == [
        "id",
        "status",
        "name",
        "claimed_by",
        "created_at",
        "completed_at",
    ]
    assert listed_ids() == [str(listed[k].id) for k in "edcba"]
    line = next(line for line in out.splitlines() if str(listed["d"].id) in line)
    assert line.split()[1:4] == ["scheduled", WF, "-"]


def test_runs_filters_and_limits(listed):
    """--status, --name, --runner and --limit narrow the listing and combine."""
    assert listed_ids("--status", "failed") == [str(listed["e"].id), str(listed["b"].id)]
    assert listed_ids("--name", "other.flow") == [str(listed["b"].id)]
    assert listed_ids("--runner", "w1") == [str(listed[k].id) for k in "eca"]
    assert listed_ids("--runner", "w1", "--status", "failed") == [str(listed["e"].id)]
    assert listed_ids("--limit", "2") == [str(listed[k].id) for k in "ed"]
    assert listed_ids("--runner", "nobody") == []


def test_runs_json_lines_parse(listed):
    """--json prints one parseable JSON object per run with the listing's fields."""
    out = command("everystep_runs", "--json", "--runner", "w1")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["id"] for row in rows] == [str(listed[k].id) for k in "eca"]
    assert rows[1] == {
        "id": str(listed["c"].id),
        "status": "running",
        "name": WF,
        "claimed_by": "w1",
        "created_at": listed["c"].created_at.isoformat(),
        "completed_at": None,
    }
    assert rows[0]["completed_at"] == listed["e"].completed_at.isoformat()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--status", "done"], "unknown status 'done'; valid: scheduled, running, completed"),
        (["--limit", "0"], "--limit must be at least 1"),
    ],
)
def test_runs_bad_arguments_are_command_errors(args, message):
    """An unknown status (the error lists the valid ones) or a zero limit is refused."""
    with pytest.raises(CommandError, match=message):
        command("everystep_runs", *args)


# --- everystep_show ------------------------------------------------------------------


@pytest.fixture
def failed_run() -> Workflow:
    """A failed run whose steps were inserted out of start order."""
    run = make_run("failed", days_ago=0, claimed_by="w1")
    error = {"type": "builtins.ValueError", "message": "card declined", "args": ["card declined"]}
    Workflow.objects.filter(id=run.id).update(error=error)
    t0 = timezone.now() - timedelta(minutes=5)
    Step.objects.create(
        workflow=run,
        step_id="2",
        name="tests.charge",
        status="failed",
        error=error,
        started_at=t0 + timedelta(seconds=2),
        finished_at=t0 + timedelta(seconds=3.5),
    )
    Step.objects.create(
        workflow=run,
        step_id="1",
        name="tests.reserve",
        status="done",
        result={"reserved": "x" * 200},
        started_at=t0,
        finished_at=t0 + timedelta(seconds=1),
    )
    Step.objects.create(
        workflow=run, step_id="0b", name="tests.audit", status="started", started_at=t0
    )
    run.refresh_from_db()
    return run


def test_show_prints_run_error_and_steps_in_start_order(failed_run):
    """The run's fields and error, then its steps by started_at then step_id, summarised."""
    out = command("everystep_show", str(failed_run.id))
    assert f"run           {failed_run.id}" in out
    assert "status        failed" in out
    assert "args          [1]" in out
    assert "claimed_by    w1" in out
    assert "error         builtins.ValueError: card declined" in out
    assert "steps (3):" in out
    step_lines = out.split("steps (3):\n")[1].splitlines()
    assert [line.split()[0] for line in step_lines] == ["0b", "1", "2"]
    assert "no outcome recorded" in step_lines[0]
    assert "1.000s" in step_lines[1] and step_lines[1].endswith("…")
    assert len(step_lines[1].rsplit("  ", 1)[1]) == 80, "the outcome is clipped to 80 characters"
    assert "1.500s" in step_lines[2] and "error: builtins.ValueError: card declined" in out


def test_show_json_has_everything_unabridged(failed_run):
    """--json prints the run and its steps in full, with durations."""
    data = json.loads(command("everystep_show", str(failed_run.id), "--json"))
    assert data["id"] == str(failed_run.id) and data["status"] == "failed"
    assert data["error"]["message"] == "card declined"
    assert [step["step_id"] for step in data["steps"]] == ["0b", "1", "2"]
    assert [step["duration"] for step in data["steps"]] == [None, 1.0, 1.5]
    assert data["steps"][1]["result"] == {"reserved": "x" * 200}


def test_show_completed_run_prints_its_result():
    """A completed run shows its result and an empty step list."""
    run = make_run("completed", days_ago=0)
    Workflow.objects.filter(id=run.id).update(result={"charged": 100})
    out = command("everystep_show", str(run.id))
    assert 'result        {"charged": 100}' in out
    assert "steps (0):" in out


@pytest.mark.parametrize(
    "run_id, message",
    [
        ("00000000-0000-0000-0000-000000000000", "no run with id"),
        ("not-a-uuid", "not a run id"),
    ],
)
def test_show_unknown_run_is_a_command_error(run_id, message):
    """An unknown or malformed run id is a clear CommandError."""
    with pytest.raises(CommandError, match=message):
        command("everystep_show", run_id)
