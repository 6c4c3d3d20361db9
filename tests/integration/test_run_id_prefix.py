"""Every command that takes a run id takes a unique prefix of it, as the UI's search does:
at least 8 hex digits, dashes and case ignored. An ambiguous prefix names a few of the
runs it matches and counts them; a prefix of no run is "no run"; either changes nothing."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from everystep import schedule
from everystep.models import Event, Status, Step, Workflow
from everystep.testing import crash_after, run_due
from tests.testapp import composition_workflows as cw
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

# Runs made here in one process: their ids differ in the first 16 hex digits (the
# millisecond, the version and a counter), which the first three groups print.
PREFIX_CHARS = len("0190a8e2-7b3c-7abc")
# A time no run of the test made has: the crafted runs below are alone under it.
SHARED = "0badc0de"


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def prefix(run: Workflow) -> str:
    return str(run.id)[:PREFIX_CHARS]


def crafted(count: int, name: str = "wf.crafted") -> list[Workflow]:
    """``count`` completed runs whose ids all start with ``SHARED``, oldest first."""
    ids = [uuid.UUID(f"{SHARED}-0000-7000-8000-{index:012x}") for index in range(1, count + 1)]
    return [Workflow.objects.create(id=id_, name=name, status=Status.COMPLETED) for id_ in ids]


def rows() -> list[tuple[Any, ...]]:
    return list(Workflow.objects.order_by("id").values_list("id", "status", "updated_at"))


# Each command taking a run id: it makes its run, acts on it by prefix, and checks the
# run (or what the action wrote) changed as the full id would have changed it.


def _show() -> None:
    run = schedule(wf.sequential, 1, 2)
    assert f"run           {run.id}\n" in command("everystep_show", prefix(run))


def _send() -> None:
    run = schedule(wf.sequential, 1, 2)
    command("everystep_send", prefix(run), "go", "--payload", "1")
    assert Event.objects.get(workflow_id=run.id).name == "go"


def _cancel() -> None:
    run = schedule(wf.sequential, 1, 2)
    command("everystep_cancel", prefix(run))
    assert Workflow.objects.get(id=run.id).status == Status.CANCELLED


def _requeue() -> None:
    run = schedule(wf.sequential, 1, 2)
    Workflow.objects.filter(id=run.id).update(status=Status.RUNNING, claimed_by="w1")
    command("everystep_requeue", prefix(run))
    assert Workflow.objects.get(id=run.id).status == Status.SCHEDULED


def _resolve_step() -> None:
    run = schedule(wf.payment, 100)
    with crash_after(wf.charge):
        run_due()
    run_due()
    command("everystep_resolve_step", prefix(run), "2", "--discard")
    assert Workflow.objects.get(id=run.id).status == Status.SCHEDULED
    assert not Step.objects.filter(workflow_id=run.id, step_id="2").exists()


def _fork() -> None:
    run = schedule(wf.failing)
    run_due()
    command("everystep_fork", prefix(run))
    assert Workflow.objects.filter(forked_from_id=run.id).count() == 1


def _children(parent: Workflow) -> list[Workflow]:
    return list(Workflow.objects.filter(parent_id=parent.id).order_by("id"))


def _runs_parent() -> None:
    parent = schedule(cw.fan_out, 3)
    run_due()
    listed = command("everystep_runs", "--parent", prefix(parent), "--json")
    assert listed.count(f'"parent": "{parent.id}"') == 3


def _bulk_parent() -> None:
    parent = schedule(cw.fan_out, 3)
    run_due()
    command("everystep_cancel", "--parent", prefix(parent))
    assert {child.status for child in _children(parent)} == {Status.CANCELLED}


BY_PREFIX: dict[str, Callable[[], None]] = {
    "everystep_show": _show,
    "everystep_send": _send,
    "everystep_cancel": _cancel,
    "everystep_requeue": _requeue,
    "everystep_resolve_step": _resolve_step,
    "everystep_fork": _fork,
    "everystep_runs --parent": _runs_parent,
    "everystep_cancel --parent": _bulk_parent,
}


@pytest.mark.parametrize("case", list(BY_PREFIX.values()), ids=list(BY_PREFIX))
def test_a_unique_prefix_names_the_run(case: Callable[[], None]) -> None:
    """Each command taking a run id acts on the one run whose id starts with the prefix."""
    case()


def test_the_first_eight_characters_are_enough_in_any_case() -> None:
    """A prefix as short as the id's first group, in upper case or with dashes, names the
    run; the lookup is a range on the primary key, never LIKE on a cast."""
    (run,) = crafted(1)
    schedule(wf.sequential, 1, 2)
    for given in (SHARED, SHARED.upper(), f"{SHARED}-00"):
        with CaptureQueriesContext(connection) as queries:
            out = command("everystep_show", given)
        assert f"run           {run.id}\n" in out
        sql = queries.captured_queries[0]["sql"].upper()
        assert "LIKE" not in sql and "CAST" not in sql and ">=" in sql, sql


def test_an_ambiguous_prefix_names_some_runs_and_counts_them() -> None:
    """A prefix of five runs is refused, naming the first three and counting all five;
    nothing changes."""
    runs = crafted(5)
    before = rows()
    first = ", ".join(f"{run.id} (wf.crafted)" for run in runs[:3])
    with pytest.raises(CommandError) as info:
        command("everystep_cancel", SHARED)
    assert str(info.value) == (
        f"run id prefix {SHARED} matches 5 runs ({first}, …); give more of the id"
    )
    assert rows() == before


def test_a_prefix_of_two_runs_names_both() -> None:
    """With fewer matches than the error names, it lists them all, with no ellipsis."""
    runs = crafted(2)
    with pytest.raises(CommandError, match=r"matches 2 runs \(.*\); give") as info:
        command("everystep_show", SHARED)
    assert str(runs[1].id) in str(info.value) and "…" not in str(info.value)


def test_a_prefix_of_no_run_says_no_run() -> None:
    """A prefix no run id starts with is the same "no run" refusal a full id gets."""
    crafted(2)
    before = rows()
    with pytest.raises(CommandError, match=r"^no run with id 0badc0df \(or an id starting"):
        command("everystep_requeue", "0badc0df")
    assert rows() == before


@pytest.mark.parametrize("given", ["0badc0d", "0badc0dx", "0badc0de-" + "0" * 30])
def test_a_short_or_malformed_prefix_is_not_a_run_id(given: str) -> None:
    """Fewer than 8 hex digits, a letter that is not hex, or more digits than an id has
    is refused before the database is asked."""
    crafted(1)
    refusal = pytest.raises(CommandError, match=r"is not a run id \(a UUID, or its first 8")
    with CaptureQueriesContext(connection) as queries, refusal:
        command("everystep_show", given)
    assert queries.captured_queries == []
