"""``everystep.fork`` and ``everystep_fork``: re-running a finished run from a step."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

import everystep
from everystep import schedule, send
from everystep.errors import EverystepError
from everystep.models import AuditEntry, Step, Workflow
from everystep.testing import deployed, run_due
from tests.testapp import recovery_workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_counts():
    wf.CALLS.clear()
    wf.BROKEN.clear()
    yield
    wf.BROKEN.clear()


def snapshot(run: Workflow) -> tuple[dict, list[dict]]:
    """Every field of the run and of each of its steps, as stored."""
    run = Workflow.objects.get(id=run.id)
    steps = [model_to_dict(s) for s in Step.objects.filter(workflow=run).order_by("id")]
    return model_to_dict(run), steps


def failed_checkout(order: int = 1, amount: int = 100) -> Workflow:
    """A checkout run whose step 2 (charge) failed."""
    wf.BROKEN.add("charge")
    run = schedule(wf.checkout, order, amount)
    run_due()
    run.refresh_from_db()
    assert run.status == "failed"
    wf.BROKEN.clear()  # the fix is deployed
    return run


def fork_command(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("everystep_fork", *args, stdout=out)
    return out.getvalue()


def the_fork(original: Workflow) -> Workflow:
    return Workflow.objects.get(forked_from=original)


def test_fork_executes_from_the_failed_step_and_leaves_the_original_as_it_was():
    """After the fix, the fork replays step 1 (its body does not run again), executes
    step 2 and on, and completes; the original is unchanged field by field."""
    original = failed_checkout()
    before = snapshot(original)
    output = fork_command(str(original.id))
    fork = the_fork(original)
    assert f"forked as run {fork.id}" in output and "from step 2" in output
    assert fork.status == "scheduled" and fork.name == original.name
    assert fork.forked_from_step == "2" and fork.args == original.args
    assert list(Step.objects.filter(workflow=fork).values_list("step_id", flat=True)) == ["1"]
    run_due()
    fork.refresh_from_db()
    assert fork.status == "completed", fork.error
    assert fork.result == [{"reserved": 1}, {"order": 1, "charged": 100}, "shipped 1"]
    assert wf.CALLS == {"reserve": 1, "charge": 2, "ship": 1}
    assert snapshot(original) == before
    assert list(original.forks.all()) == [fork]


def test_from_step_1_runs_step_1_again():
    original = failed_checkout()
    fork_command(str(original.id), "--from-step", "1")
    fork = the_fork(original)
    assert fork.forked_from_step == "1"
    assert not Step.objects.filter(workflow=fork).exists()
    run_due()
    fork.refresh_from_db()
    assert fork.status == "completed"
    assert wf.CALLS["reserve"] == 2


def test_new_arguments_are_used():
    original = failed_checkout(order=1, amount=100)
    fork_command(str(original.id), "--args", "[1, 250]")
    fork = the_fork(original)
    assert fork.args == [1, 250]
    run_due()
    fork.refresh_from_db()
    assert fork.result[1] == {"order": 1, "charged": 250}


@pytest.mark.parametrize(
    "args, message",
    [
        (["not-a-uuid"], "not a run id"),
        (["00000000-0000-7000-8000-000000000000"], "no run with id"),
        (["{run}", "--args", "[1,"], "--args"),
        (["{run}", "--args", '{"order": 1}'], "must be a JSON array"),
        (["{run}", "--from-step", "9"], "has no record at step '9'"),
        (["{run}", "--args", '["one"]'], "would fail on replay"),
    ],
)
def test_bad_input_is_a_clear_error_that_creates_nothing(args, message):
    original = failed_checkout()
    runs, steps = Workflow.objects.count(), Step.objects.count()
    with pytest.raises(CommandError, match=message):
        fork_command(*(arg.replace("{run}", str(original.id)) for arg in args))
    assert (Workflow.objects.count(), Step.objects.count()) == (runs, steps)
    assert not AuditEntry.objects.filter(action="fork").exists()


def test_a_run_still_going_is_not_forked():
    run = schedule(wf.checkout, 1, 1)
    with pytest.raises(CommandError, match="is scheduled: only finished runs"):
        fork_command(str(run.id))


def test_a_fork_that_would_fail_on_replay_is_refused_with_the_reason():
    """Code that now calls another step where step 1 was recorded: the fork is refused
    (as everystep_check_replay would report the run), and nothing is written."""
    original = failed_checkout()

    def reordered(order: int, amount: int) -> list[object]:
        return [wf.ship(order), wf.charge(order, amount)]

    with deployed(wf.checkout, reordered), pytest.raises(EverystepError) as refused:
        everystep.fork(original)
    assert "would fail on replay" in str(refused.value)
    assert "step 1 was recorded as" in str(refused.value)
    assert not Workflow.objects.filter(forked_from=original).exists()


def test_a_completed_run_needs_a_from_step():
    run = schedule(wf.checkout, 1, 1)
    run_due()
    with pytest.raises(EverystepError, match="name the step to run again"):
        everystep.fork(run)
    fork = everystep.fork(run, from_step="3")
    run_due()
    fork.refresh_from_db()
    assert fork.status == "completed" and wf.CALLS["ship"] == 2


def test_inside_a_parallel_fork_the_other_branch_keeps_its_records():
    """A failed step in one branch: the fork keeps the other branch's records and the
    failed branch's records before its failed step, and executes the rest."""
    wf.BROKEN.add("right-b")
    original = schedule(wf.branches)
    run_due()
    original.refresh_from_db()
    assert original.status == "failed"
    wf.BROKEN.clear()
    fork = everystep.fork(original)
    copied = set(Step.objects.filter(workflow=fork).values_list("step_id", flat=True))
    assert copied == {"1", "2.0.1", "2.0.2", "2.1.1"}
    assert fork.forked_from_step == "2.1.2"
    run_due()
    fork.refresh_from_db()
    assert fork.status == "completed"
    assert fork.result == ["first", ["left-a", "left-b"], ["right-a", "right-b"], "last"]
    assert wf.CALLS == {"first": 1, "left-a": 1, "left-b": 1, "right-a": 1, "right-b": 2, "last": 1}


def test_sleeps_waits_patches_and_child_starts_are_carried_over():
    """Records of every kind before the failed step are copied: the fork does not sleep
    or wait again, takes the original's patch branch, and names the original's child
    (no second child is started)."""
    wf.BROKEN.add("charge")
    original = schedule(wf.carried, 4)
    run_due(advance=1)
    send(original.id, "approval", {"ok": True})
    run_due(advance=1)
    original.refresh_from_db()
    assert original.status == "failed", original.status
    wf.BROKEN.clear()
    fork = everystep.fork(original)
    names = dict(Step.objects.filter(workflow=fork).values_list("step_id", "name"))
    assert set(names.values()) >= {
        "everystep.sleep",
        "everystep.wait_for",
        "everystep.patched",
        "everystep.start",
    }, names
    children = Workflow.objects.filter(name=wf.lapse.__everystep_workflow__.name).count()
    run_due()
    fork.refresh_from_db()
    assert fork.status == "completed", fork.error
    payload, branch, child_id, charged = fork.result
    assert payload == {"ok": True} and branch == "new" and charged == {"order": 4, "charged": 5}
    assert child_id == str(Workflow.objects.get(parent=original).id)
    assert Workflow.objects.filter(name=wf.lapse.__everystep_workflow__.name).count() == children


def test_the_command_writes_an_audit_entry_and_the_api_does_not():
    original = failed_checkout()
    fork_command(str(original.id))
    entry = AuditEntry.objects.get(action="fork")
    assert entry.run_id == original.id and entry.via == "everystep_fork"
    assert entry.actor.startswith("command")
    assert entry.detail == {"fork": str(the_fork(original).id), "from_step": "2"}
    everystep.fork(original)
    assert AuditEntry.objects.filter(action="fork").count() == 1


def test_json_args_are_stored_as_schedule_stores_them():
    original = failed_checkout()
    fork = everystep.fork(original, args=[1, 3])
    assert fork.args == json.loads("[1, 3]")


def test_the_command_forks_every_finished_run_a_filter_matches():
    """--dry-run counts and writes nothing; then one fork per failed run of the workflow,
    a run still scheduled left alone, one bulk_fork entry."""
    failed = [failed_checkout(order=n) for n in (1, 2, 3)]
    waiting = schedule(wf.checkout, 9, 9)
    name = wf.checkout.__everystep_workflow__.name
    runs = Workflow.objects.count()
    output = fork_command("--workflow", name, "--status", "failed", "--dry-run")
    assert output.startswith("3 runs match") and Workflow.objects.count() == runs
    output = fork_command("--workflow", name, "--status", "failed", "--batch-size", "2")
    assert output.startswith("forked 3 runs")
    forks = Workflow.objects.filter(forked_from__in=failed)
    assert forks.count() == 3 and not Workflow.objects.filter(forked_from=waiting).exists()
    assert AuditEntry.objects.get(action="bulk_fork").count == 3
    with pytest.raises(CommandError, match="give a run id with it"):
        fork_command("--status", "failed", "--args", "[1, 2]")
    with pytest.raises(CommandError, match="not both"):
        fork_command(str(failed[0].id), "--status", "failed")


def test_the_ui_shows_why_a_fork_was_refused(client):
    """The run page's Fork action refused: the page after it gives the reason the POST
    found, signed for this run (issue 39): the GET runs no workflow code and writes
    nothing, and a reason forged, or signed for another run, is not shown."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from tests.staff import staff_user

    original = failed_checkout()
    client.force_login(staff_user("fork_workflow"))
    bodies = []

    def reordered(order: int, amount: int) -> list[object]:
        bodies.append(order)
        return [wf.ship(order), wf.charge(order, amount)]

    with deployed(wf.checkout, reordered):
        response = client.post(
            reverse("everystep:run-action", args=[original.id]), {"action": "fork"}
        )
        assert response.status_code == 302
        location = response["Location"]
        assert "error=fork-refused" in location
        assert "replay" not in location
        ran_for_the_post = len(bodies)
        with CaptureQueriesContext(connection) as queries:
            page = client.get(location).content.decode()
            client.get(location + "&refresh=1")
    assert ran_for_the_post >= 1 and len(bodies) == ran_for_the_post  # none for the GETs
    statements = [query["sql"].upper() for query in queries.captured_queries]
    writes = [sql for sql in statements if sql.split()[0] in {"INSERT", "UPDATE", "DELETE"}]
    assert not writes and not [sql for sql in statements if "FOR UPDATE" in sql]
    assert "would fail on replay" in page and "step 1 was recorded as" in page
    assert not Workflow.objects.filter(forked_from=original).exists()
    # A token forged, cut, or signed for another run: the page says only the key's text.
    other = failed_checkout()
    token = location.split("why=")[1]
    for url in (
        location.replace("why=", "why=x"),
        location[:-5],
        reverse("everystep:run", args=[other.id]) + "?error=fork-refused&why=" + token,
    ):
        shown = client.get(url).content.decode()
        assert "cannot be forked from there" in shown and "recorded as" not in shown


def test_a_refused_forks_page_costs_what_the_plain_page_costs(client):
    """The refused fork's page of a run with big steps (300 steps of 100 KB here; 1,500 in the
    report of issue 41) takes no more memory than the plain page: it loads no step's
    data for the reason (before, it loaded every step once more, twice with
    ``from_step``)."""
    import tracemalloc

    from django.urls import reverse
    from django.utils import timezone

    from everystep.ui import notices
    from tests.staff import staff_user

    name = wf.checkout.__everystep_workflow__.name
    run = Workflow.objects.create(name=name, status="failed", args=[1, 100])
    now = timezone.now()
    Step.objects.bulk_create(
        (
            Step(
                workflow=run,
                step_id=str(i),
                name="tests.testapp.recovery_workflows.ship",
                status="done",
                result="x" * 100_000,
                started_at=now,
                finished_at=now,
            )
            for i in range(1, 301)
        ),
        batch_size=50,  # MariaDB: one statement stays under max_allowed_packet
    )
    client.force_login(staff_user("fork_workflow"))
    plain = reverse("everystep:run", args=[run.id])
    why = notices.sign_fork_reason(str(run.id), "step 1 was recorded as something else")
    refused = f"{plain}?error=fork-refused&from_step=1&why={why}"

    def peak(url: str) -> int:
        client.get(url)  # warm: imports, templates
        tracemalloc.start()
        try:
            assert client.get(url).status_code == 200
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    plain_peak, refused_peak = peak(plain), peak(refused)
    assert refused_peak <= 2 * plain_peak
    # Loading the steps for a reason would cost their 30 MB once more, at least.
    assert refused_peak - plain_peak < 5_000_000, (plain_peak, refused_peak)


def test_the_same_fork_confirmation_sent_twice_forks_once(client):
    """A double click sends the run page's fork form twice with one confirmation: one
    fork, one audit entry, and both answers open that fork (issue 39). A new page view
    brings a new confirmation, which forks again."""
    import re
    import threading

    from django.urls import reverse

    from tests.staff import staff_user

    original = failed_checkout()
    client.force_login(staff_user("fork_workflow"))
    page = client.get(reverse("everystep:run", args=[original.id])).content.decode()
    confirm = re.search(r'name="confirm" value="([0-9a-f]{32})"', page).group(1)
    url = reverse("everystep:run-action", args=[original.id])
    form = {"action": "fork", "confirm": confirm}
    first, second = client.post(url, form), client.post(url, form)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Workflow.objects.filter(forked_from=original).count() == 1
    assert AuditEntry.objects.filter(action="fork").count() == 1
    # Two at once, straight to the engine: the database's unique key settles the race.
    key = "everystep.ui.fork:" + "f" * 32
    made: list[Workflow] = []

    def fork_once() -> None:
        from django.db import connections

        try:
            made.append(_fork(original, key))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=fork_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(made) == 2 and made[0].id == made[1].id
    assert Workflow.objects.filter(forked_from=original).count() == 2
    fresh = client.get(reverse("everystep:run", args=[original.id])).content.decode()
    assert f'value="{confirm}"' not in fresh


def _fork(original: Workflow, key: str) -> Workflow:
    from everystep.replays.fork import fork_run

    return fork_run(original, idempotency_key=key)
