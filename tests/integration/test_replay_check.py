"""``everystep_check_replay``: unfinished runs replayed against new code, nothing written,
no step body run; ``patched()`` makes an incompatible change pass."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from everystep import schedule
from everystep.errors import EverystepError
from everystep.models import Event, Step, Workflow
from everystep.replays.check import check_replay
from everystep.store import database
from everystep.testing import crash_at, deployed, run_due
from tests.testapp import versioned as v
from tests.testapp.models import Execution
from tests.workers import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def database_state() -> list[Any]:
    """Every row the check could write, with the columns a write would change."""
    return [
        sorted(
            Workflow.objects.values_list(
                "id", "status", "claimed_by", "claim_token", "due_at", "waiting_for", "error"
            ),
            key=str,
        ),
        sorted(Step.objects.values_list("workflow_id", "step_id", "status", "result"), key=str),
        sorted(Event.objects.values_list("workflow_id", "name"), key=str),
        Execution.objects.count(),
    ]


def check(*args: str) -> tuple[int, dict[str, Any]]:
    """Run the command with --json: (exit status, report)."""
    out = StringIO()
    try:
        call_command("everystep_check_replay", "--json", *args, stdout=out)
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    return status, json.loads(out.getvalue())


def checked_without_effects(body: Callable[[], Any]) -> Any:
    """Run ``body`` (a check) and require that it wrote nothing and ran no step body."""
    before, calls = database_state(), dict(v.CALLS)
    result = body()
    assert database_state() == before, "the check changed the database"
    assert dict(v.CALLS) == calls, "the check ran a step body"
    return result


@pytest.fixture
def parked_orders() -> list[Workflow]:
    """Three runs of order version 1 parked at their wait (past the charge), and one not
    started yet."""
    runs = [schedule(v.order, n) for n in (1, 2, 3)]
    run_due()
    assert all(Workflow.objects.get(id=r.id).waiting_for == "go" for r in runs)
    runs.append(schedule(v.order, 4))
    return runs


def by_workflow(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(entry for entry in report["workflows"] if entry["workflow"] == name)


def test_a_compatible_change_passes(parked_orders):
    with deployed(v.order, v.order_compatible):
        status, report = checked_without_effects(check)
    assert status == 0
    assert (report["ok"], report["checked"], report["failing"]) == (True, 4, 0)


def test_an_incompatible_change_names_the_step_and_both_functions(parked_orders):
    with deployed(v.order, v.order_taxed):
        status, report = checked_without_effects(check)
    assert status == 1
    entry = by_workflow(report, "tests.versioned.order")
    assert entry["checked"] == 4
    failing = {f["run_id"]: f for f in entry["failing"]}
    assert set(failing) == {str(run.id) for run in parked_orders[:3]}, "the fresh run passes"
    for failure in failing.values():
        assert failure["step_id"] == "2"
        assert failure["recorded"] == "tests.testapp.versioned.charge"
        assert failure["called"] == "tests.testapp.versioned.charge_with_tax"
        assert failure["status"] == "scheduled"


def test_the_text_report_lists_the_failing_runs_and_exits_1(parked_orders):
    out = StringIO()
    with deployed(v.order, v.order_taxed), pytest.raises(SystemExit) as exit_:
        call_command("everystep_check_replay", stdout=out)
    assert exit_.value.code == 1
    text = out.getvalue()
    assert "FAIL tests.versioned.order: 4 runs checked, 3 of 4 runs would fail" in text
    assert (
        f"run {parked_orders[0].id} (scheduled): step 2: recorded "
        "tests.testapp.versioned.charge, the code now calls "
        "tests.testapp.versioned.charge_with_tax"
    ) in text
    assert text.rstrip().endswith("would fail after a deploy of this code")


def test_with_patched_the_same_change_passes_and_the_patch_is_counted(parked_orders):
    with deployed(v.order, v.order_patched):
        status, report = checked_without_effects(check)
    assert status == 0, report
    entry = by_workflow(report, "tests.versioned.order")
    # The three parked runs are past the patch (old branch); the fresh one has not
    # started, so its replay stops at its first step, before the patch.
    assert entry["patches"] == [{"change_id": "tax", "new_branch": 0, "old_branch": 3}]


def test_deprecate_patch_is_reported_while_runs_need_the_old_branch(parked_orders):
    with deployed(v.order, v.order_deprecated):
        status, report = checked_without_effects(check)
    assert status == 1
    failing = by_workflow(report, "tests.versioned.order")["failing"]
    assert len(failing) == 3
    assert {(f["step_id"], f["recorded"], f["called"]) for f in failing} == {
        ("patched tax", "patched('tax') = False", "deprecate_patch('tax')")
    }


def test_the_check_says_when_deprecate_patch_may_replace_a_patch():
    """Every unfinished run took the new branch: the report says the old one may go."""
    with deployed(v.order, v.order_patched):
        runs = [schedule(v.order, n) for n in (1, 2)]
        run_due()  # both decide "tax" (new branch), charge with tax, and park at the wait
        out = StringIO()
        checked_without_effects(lambda: call_command("everystep_check_replay", stdout=out))
        status, report = check()
    assert status == 0 and report["complete"] is True
    entry = by_workflow(report, "tests.versioned.order")
    assert entry["patches"] == [{"change_id": "tax", "new_branch": len(runs), "old_branch": 0}]
    assert (
        "patch 'tax': no checked run takes the old branch (2 the new); "
        "deprecate_patch('tax') may replace it"
    ) in out.getvalue()
    # Not said when the check saw only some of the runs.
    with deployed(v.order, v.order_patched):
        _, partial = check("--limit", "1")
    assert partial["complete"] is False


def test_running_and_blocked_runs_are_checked_and_left_as_they_are(blocked_run):
    """A run left running by a dead worker keeps its claim; a blocked run stays blocked."""
    running = schedule(v.order, 7)
    with crash_at("after_record", v.charge):  # the worker dies once the charge is recorded
        run_due()
    assert Workflow.objects.get(id=running.id).status == "running"
    with deployed(v.order, v.order_taxed):
        status, report = checked_without_effects(
            lambda: check("--status", "running", "--status", "blocked")
        )
    assert (status, report["checked"]) == (1, 2)
    (failure,) = by_workflow(report, "tests.versioned.order")["failing"]
    assert (failure["run_id"], failure["status"], failure["step_id"]) == (
        str(running.id),
        "running",
        "2",
    )
    assert by_workflow(report, blocked_run.name)["failing"] == []


def test_the_check_refuses_to_run_inside_a_transaction(parked_orders):
    """Its read-only mode would leak into the caller's transaction."""
    with transaction.atomic(), pytest.raises(EverystepError, match="outside a transaction"):
        check_replay()


def test_the_check_follows_each_run_down_its_recorded_branch():
    """The body branches on a recorded result and on context.current(): only the run
    that went down the changed branch is reported."""
    large, little = schedule(v.branchy, 9), schedule(v.branchy, 2)
    run_due()
    with deployed(v.branchy, v.branchy_v2):
        status, report = checked_without_effects(check)
    assert status == 1
    failing = by_workflow(report, "tests.versioned.branchy")["failing"]
    assert [(f["run_id"], f["step_id"]) for f in failing] == [(str(little.id), "2")]
    assert failing[0]["recorded"].endswith(".small")
    assert failing[0]["called"].endswith(".small_v2")
    assert str(large.id) not in {f["run_id"] for f in failing}


def test_a_fork_branch_change_is_found_and_patched_in_the_branch():
    run = schedule(v.fanout, 5)
    run_due()
    with deployed(v.fanout, v.fanout_taxed):
        status, report = checked_without_effects(check)
    assert status == 1
    (failure,) = by_workflow(report, "tests.versioned.fanout")["failing"]
    assert (failure["run_id"], failure["step_id"]) == (str(run.id), "1.1.1")
    with deployed(v.fanout, v.fanout_patched):
        status, report = checked_without_effects(check)
    assert status == 0, report


def test_an_unregistered_workflow_and_a_changed_signature_are_reported(parked_orders):
    orphan = Workflow.objects.create(name="tests.versioned.gone", args=[1])
    with deployed(v.order, v.order_new_argument):
        status, report = checked_without_effects(check)
    assert status == 1
    (gone,) = by_workflow(report, "tests.versioned.gone")["failing"]
    assert gone["run_id"] == str(orphan.id)
    assert "no @workflow is registered under 'tests.versioned.gone'" in gone["reason"]
    reasons = [f["reason"] for f in by_workflow(report, "tests.versioned.order")["failing"]]
    assert len(reasons) == 4  # the fresh run too: its body cannot even start
    assert all(r.startswith("the body raises TypeError") for r in reasons)


def test_a_body_that_writes_between_steps_is_refused_by_the_database(parked_orders):
    with deployed(v.order, v.order_writes_between_steps):
        status, report = checked_without_effects(check)
    assert status == 1
    failing = by_workflow(report, "tests.versioned.order")["failing"]
    # The three runs past the first step reach the write; every one is refused, and each
    # run after a refused one is still checked (a savepoint per run).
    assert len(failing) == 3
    assert all(f["reason"].startswith("the body raises") for f in failing)


def test_filters_and_limit():
    first = [schedule(v.order, n) for n in (1, 2, 3)]
    run_due()
    other = schedule(v.branchy, 1)
    run_due()
    with deployed(v.order, v.order_taxed):
        status, report = check("--workflow", "tests.versioned.branchy")
        assert (status, report["checked"]) == (0, 1)
        status, report = check("--limit", "2")
        assert (status, report["checked"], report["truncated"]) == (1, 2, True)
        assert [f["run_id"] for f in report["workflows"][0]["failing"]] == [
            str(first[0].id),
            str(first[1].id),
        ], "oldest first"
        status, report = check("--status", "running", "--status", "blocked")
        assert (status, report["checked"]) == (0, 0)
    Workflow.objects.filter(id=other.id).update(status="completed")
    status, report = check("--workflow", "tests.versioned.branchy")
    assert (status, report["checked"]) == (0, 0), "finished runs are not checked"


def test_batches_cover_every_run(monkeypatch):
    monkeypatch.setattr("everystep.replays.check.BATCH", 2)
    runs = [schedule(v.order, n) for n in range(5)]
    run_due()
    with deployed(v.order, v.order_taxed):
        report = check_replay()
    assert report.checked == 5
    failing = report.workflows["tests.versioned.order"].failures
    assert sorted(str(f.run_id) for f in failing) == sorted(str(r.id) for r in runs)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--status", "completed"], "invalid choice"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--workflow", "a\x00b"], "NUL"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    with pytest.raises(CommandError, match=message) as error:
        call_command("everystep_check_replay", *args)
    if args[0] != "--status":  # argparse's own errors exit 2 from the command line
        assert error.value.returncode == 2, "1 would read as 'runs would fail'"


# SQLite with the OPTIONS docs/running/databases.md recommends, which the runner also adds
# to every sqlite URL (image/everystep_runner/dburl.py): Django then begins each
# transaction with BEGIN IMMEDIATE, a request for the write lock.
MIGRATE_HINT = "CommandError: everystep's tables are missing: run `python manage.py migrate`"


@pytest.fixture
def immediate() -> Iterator[BaseDatabaseWrapper]:
    """everystep's SQLite connection, reconnected with transaction_mode IMMEDIATE whatever
    the tier's settings say (EVERYSTEP_TEST_SQLITE_DEFAULT_TXN)."""
    conn = database.connection()
    saved = conn.settings_dict["OPTIONS"]
    conn.close()
    # A new dict: another alias's settings may share this one.
    conn.settings_dict["OPTIONS"] = {**saved, "transaction_mode": "IMMEDIATE"}
    try:
        conn.ensure_connection()
        yield conn
    finally:
        conn.close()
        conn.settings_dict["OPTIONS"] = saved


@pytest.mark.backends("sqlite")
def test_on_sqlite_with_begin_immediate_the_check_passes_beside_a_writer(parked_orders, immediate):
    """With transaction_mode IMMEDIATE the check reads in deferred transactions: it
    replays every run while another connection holds the write lock, writes nothing, and
    leaves the connection writing with BEGIN IMMEDIATE again."""
    writer = sqlite3.connect(immediate.settings_dict["NAME"], isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # a worker in the middle of a write
        with deployed(v.order, v.order_compatible):
            status, report = checked_without_effects(check)
        assert (status, report["ok"], report["checked"]) == (0, True, 4)
        with deployed(v.order, v.order_taxed):
            status, report = checked_without_effects(check)
        assert (status, report["failing"]) == (1, 3)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert getattr(immediate, "transaction_mode", "IMMEDIATE") == "IMMEDIATE"
    run = schedule(v.order, 5)  # query_only is off again: the connection writes
    assert Workflow.objects.get(id=run.id).status == "scheduled"


FRESH_SETTINGS = """\
import os

from tests.settings import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["EVERYSTEP_TEST_FRESH_DB"]  # noqa: F405
DATABASES["default"]["OPTIONS"] = {  # noqa: F405
    "timeout": 30,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL;",
}
"""


@pytest.mark.backends("sqlite")
def test_on_an_unmigrated_sqlite_database_with_begin_immediate_the_check_says_to_migrate(
    tmp_path: Path,
):
    """`manage.py everystep_check_replay` on a SQLite file without everystep's tables,
    with transaction_mode IMMEDIATE, exits 2 with the one "run migrate" line."""
    (tmp_path / "fresh_settings.py").write_text(FRESH_SETTINGS)
    env = worker_env(str(tmp_path))
    env.pop("EVERYSTEP_TEST_ALIAS", None)  # one database, "default", as most projects
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "fresh_settings",
            "EVERYSTEP_TEST_DB": "sqlite",
            "EVERYSTEP_TEST_FRESH_DB": str(tmp_path / "fresh.sqlite3"),
        }
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "everystep_check_replay"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.splitlines()
    assert (done.returncode, len(lines)) == (2, 1), done.stderr
    assert lines[0].startswith(MIGRATE_HINT), lines[0]


def runner(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`everystep-runner` with the example project on the database at ``url``, with no
    EVERYSTEP_* configuration from this environment."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVERYSTEP_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"HOME": str(tmp_path), "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)})
    project = (
        "--project-dir",
        str(ROOT / "image" / "example_project"),
        "--settings-module",
        "mysite.settings",
    )
    return subprocess.run(
        [sys.executable, "-m", "everystep_runner", *project, "--database-url", url, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.backends("sqlite")
def test_the_runner_role_check_replay_on_sqlite_urls(tmp_path: Path):
    """The runner's `check-replay` role (which gives a sqlite URL transaction_mode
    IMMEDIATE) passes on a migrated database holding an unfinished run, and says to run
    migrate (exit 2) on a database without everystep's tables."""
    url = f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    schedule_one = (
        "from everystep import schedule; from shop.workflows import fulfil; schedule(fulfil, 7)"
    )
    for command in (["migrate", "--noinput", "-v", "0"], ["shell", "-c", schedule_one]):
        done = runner(tmp_path, url, *command)
        assert done.returncode == 0, done.stderr
    passing = runner(tmp_path, url, "check-replay", "--json")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert json.loads(passing.stdout)["checked"] == 1
    missing = runner(tmp_path, f"sqlite:///{tmp_path / 'fresh.sqlite3'}", "check-replay")
    lines = missing.stderr.splitlines()
    assert (missing.returncode, len(lines)) == (2, 1), missing.stderr
    assert lines[0].startswith(MIGRATE_HINT), lines[0]


def test_the_check_counts_runs_the_new_code_moves_on_which_old_workers_then_leave():
    """A run stopped after its first step takes the patch's new branch at its next step:
    the check counts it, as old workers will hand it back once a new worker records it.
    Runs past the patch (the old branch, recorded) are not counted."""
    parked = schedule(v.order, 1)
    run_due()
    assert Workflow.objects.get(id=parked.id).waiting_for == "go"
    with crash_at("before_body", v.charge):
        stopped = schedule(v.order, 5)
        run_due(max_passes=1)
    assert Step.objects.filter(workflow_id=stopped.id).count() == 1  # reserve only
    with deployed(v.order, v.order_patched):
        status, report = checked_without_effects(check)
        out = StringIO()
        call_command("everystep_check_replay", stdout=out)
    assert status == 0, report
    entry = by_workflow(report, "tests.versioned.order")
    assert entry["moving_on"] == 1
    assert entry["patches"] == [{"change_id": "tax", "new_branch": 1, "old_branch": 1}]
    assert (
        "1 runs take a patch's new branch at their next step: once a worker on this code "
        "records it, workers still on the code before it leave them for workers on this code"
    ) in out.getvalue()
