"""Bad input to the management commands: malformed and unknown run ids, NUL and bytes
that are not UTF-8, huge values, numbers out of range and JSON that is not JSON. Each
is a one-line CommandError (exit status 1 from the shell, no traceback) and changes no
row."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from everystep import schedule, serde
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.testapp import workflows as wf
from tests.workers import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

MEGABYTE = "x" * (1 << 20)
UNKNOWN = "01a22f98-917e-79a0-9268-3f7c8434cff5"
RUN_ID_COMMANDS = ["everystep_show", "everystep_cancel", "everystep_requeue"]


def recorded() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every run and step row with every column: what refused input must leave as is."""
    runs = list(Workflow.objects.order_by("id").values_list())
    steps = list(Step.objects.order_by("id").values_list())
    return runs, steps


@pytest.fixture
def history(blocked_run: Workflow) -> dict[str, Workflow]:
    """A blocked, a completed, a failed and a running run."""
    done, failed = schedule(wf.sequential, 1, 2), schedule(wf.failing)
    run_due()
    running = schedule(wf.sequential, 3, 4)
    Workflow.objects.filter(id=running.id).update(status="running", claimed_by="w1")
    return {"blocked": blocked_run, "completed": done, "failed": failed, "running": running}


def refused(*args: str, match: str) -> str:
    """Run a command that must fail: its one-line, short message, matching ``match``."""
    with pytest.raises(CommandError, match=match) as info:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    message = str(info.value)
    assert "\n" not in message and len(message) < 500, message
    return message


def per_command(*commands: str, args: tuple[str, ...] = ()) -> list[Any]:
    return [pytest.param(command, *args, id=command) for command in commands]


# --- run ids ---------------------------------------------------------------------------

# (One character fewer than an id is an id prefix: test_run_id_prefix.py.)
BAD_RUN_IDS = ["not-a-uuid", "", "\x00", "\udcff", MEGABYTE, UNKNOWN + "x", UNKNOWN[:7]]


@pytest.mark.parametrize("command", [*RUN_ID_COMMANDS, "everystep_resolve_step"])
@pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=range(len(BAD_RUN_IDS)))
def test_malformed_run_ids_are_refused(history, command, run_id):
    """A run id that is not a UUID is refused before the database is asked."""
    before = recorded()
    extra = ["2", "--discard"] if command == "everystep_resolve_step" else []
    refused(command, run_id, *extra, match="is not a run id")
    assert recorded() == before


@pytest.mark.parametrize("command", [*RUN_ID_COMMANDS, "everystep_resolve_step"])
def test_unknown_run_ids_are_refused(history, command):
    """A well-formed id of no run says so."""
    before = recorded()
    extra = ["2", "--discard"] if command == "everystep_resolve_step" else []
    refused(command, UNKNOWN, *extra, match=f"no run with id {UNKNOWN}")
    assert recorded() == before


def test_a_run_id_in_another_uuid_spelling_is_understood(history):
    """Upper case, braces or no dashes name the same run."""
    run = history["completed"]
    out = io.StringIO()
    call_command("everystep_show", "{" + run.id.hex.upper() + "}", stdout=out)
    assert f"run           {run.id}" in out.getvalue()


def test_show_cuts_a_five_megabyte_run_to_one_line(history):
    """A run with 5 MB of arguments: the text view prints a line of 2,000 characters and
    says --json prints everything, which it does."""
    run = Workflow.objects.create(name="big", args=["x" * (5 << 20)])
    out = io.StringIO()
    call_command("everystep_show", str(run.id), stdout=out)
    (args_line,) = [line for line in out.getvalue().splitlines() if line.startswith("args ")]
    assert args_line.endswith("… (5,242,884 characters; --json prints all)")
    assert len(args_line) < 2_100
    out = io.StringIO()
    call_command("everystep_show", str(run.id), "--json", stdout=out)
    assert len(out.getvalue()) > 5 << 20


# --- everystep_runs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, match",
    [
        (["--name", "a\x00b"], "--name contains \\\\u0000 at position 1: a NUL character"),
        (["--runner", "\x00"], "--runner contains \\\\u0000"),
        (["--runner", "w1\udcff"], "--runner contains \\\\udcff at position 2: a lone surrogate"),
        (["--status", "\x00"], "unknown status '\\\\x00'"),
        (["--status", MEGABYTE], "unknown status 'xxx"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--limit", str(10**20)], "--limit must be at most 1000000"),
        (["--limit", "many"], "invalid int value"),
    ],
    ids=[
        "nul-name",
        "nul-runner",
        "surrogate",
        "nul-status",
        "huge-status",
        "zero",
        "huge",
        "word",
    ],
)
def test_runs_refuses_bad_filters(history, args, match):
    """Filters no database can match, unknown statuses and out-of-range limits."""
    refused("everystep_runs", *args, match=match)


def test_runs_with_a_huge_name_lists_nothing(history):
    """A megabyte of workflow name is a valid question with no answer."""
    out = io.StringIO()
    call_command("everystep_runs", "--name", MEGABYTE, "--runner", MEGABYTE, stdout=out)
    assert out.getvalue().splitlines()[1:] == []


# --- everystep_prune ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, match",
    [
        (["--older-than", "\x00"], "must be a number of days, not '\\\\x00'"),
        (["--older-than", MEGABYTE], "must be a number of days, not 'xxx"),
        (["--older-than", "1" * 400], "positive number of days"),  # inf
        (["--older-than", "30", "--batch-size", str(10**20)], "--batch-size must be at most"),
        (["--older-than", "30", "--status", "\x00"], "cannot prune status \\\\u0000"),
        (["--older-than", "30", "--status", MEGABYTE], "cannot prune status x+…: only"),
    ],
    ids=["nul", "huge", "infinite", "huge-batch", "nul-status", "huge-status"],
)
def test_prune_refuses_bad_values_and_deletes_nothing(history, args, match):
    """Bad days, batch sizes and statuses are refused; no run or step goes."""
    before = recorded()
    refused("everystep_prune", *args, match=match)
    assert recorded() == before


# --- everystep_requeue_runner --------------------------------------------------------------


@pytest.mark.parametrize(
    "name, match",
    [("\x00", "a NUL character"), ("w1\x00", "at position 2"), ("\udcff", "a lone surrogate")],
)
def test_requeue_runner_refuses_names_no_runner_can_have(history, name, match):
    """A runner name no database stores is refused; the runs of w1 stay where they are."""
    before = recorded()
    refused("everystep_requeue_runner", name, "--force", match=match)
    assert recorded() == before


def test_requeue_runner_with_a_huge_name_requeues_nothing(history):
    """A megabyte of runner name is an unknown runner: refused in a short message, nothing
    requeued."""
    before = recorded()
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^unknown runner 'xxx") as caught:
        call_command("everystep_requeue_runner", MEGABYTE, stdout=out)
    assert len(str(caught.value)) < 400
    assert out.getvalue() == ""
    assert recorded() == before


# --- everystep_resolve_step ---------------------------------------------------------------


BAD_SETTLEMENTS = [
    (["\x00", "--discard"], "the step id contains \\\\u0000 at position 0"),
    (["2\udcff", "--discard"], "the step id contains \\\\udcff"),
    ([MEGABYTE, "--discard"], "the step id is 1048576 characters; step ids have 300 at most"),
    (["9", "--discard"], "has no step '9'"),
    (["1", "--discard"], "is done, not started"),
    (["2", "--result", ""], "the result is not valid JSON"),
    (["2", "--result", "{no"], "the result is not valid JSON"),
    (["2", "--result", "\x00"], "the result is not valid JSON"),
    (["2", "--result", MEGABYTE], "the result is not valid JSON"),
    (["2", "--result", "NaN"], "non-finite float nan"),
    (["2", "--result", "[" * 100_000], "nests too deeply|not valid JSON"),
    (["2", "--result", "[" * 40 + "]" * 40], "more than 31 levels"),
    (["2", "--result", "1" * 5_000], "holds a number too long to read"),
    (["2", "--error", ""], "an error needs a non-empty message"),
    (["2", "--error", " \t\n"], "an error needs a non-empty message"),
]


@pytest.mark.parametrize("args, match", BAD_SETTLEMENTS, ids=range(len(BAD_SETTLEMENTS)))
def test_resolve_step_refuses_bad_input_and_changes_nothing(history, args, match):
    """Step ids no step can have, JSON that is not JSON (or not storable) and empty
    messages are refused; the run stays blocked with its steps as they were."""
    before = recorded()
    refused("everystep_resolve_step", str(history["blocked"].id), *args, match=match)
    assert recorded() == before


@pytest.mark.parametrize(
    "command, flag",
    [("everystep_send", "--payload"), ("everystep_fork", "--args")],
)
def test_a_number_past_pythons_digit_cap_is_one_clear_line(history, command, flag):
    """A JSON int over 4,300 digits, which Python refuses with a ValueError of its own,
    is the same one-line error as any JSON that cannot be read."""
    before = recorded()
    extra = ["an-event"] if command == "everystep_send" else []
    run = history["blocked" if command == "everystep_send" else "completed"]
    refused(command, str(run.id), *extra, flag, "[" + "7" * 5_000 + "]", match="too long to read")
    assert recorded() == before


def test_resolve_step_with_a_nul_in_the_result_round_trips(history):
    """A JSON result holding a NUL (\\u0000) settles the step on every database; the
    resumed run returns it exactly."""
    run = history["blocked"]
    call_command("everystep_resolve_step", str(run.id), "2", "--result", '{"k": "a\\u0000b"}')
    run_due()
    run.refresh_from_db()
    assert (run.status, serde.decode(run.result)) == ("completed", {"k": "a\x00b"})


# --- from a shell: bytes that are not UTF-8 --------------------------------------------------


SHELL_CASES = [
    ["everystep_runs", "--runner", b"\xff\xfe"],
    ["everystep_runs", "--name", b"orders\xc3("],
    ["everystep_requeue_runner", b"w\xff"],
    ["everystep_show", b"\xff"],
    ["everystep_cancel", b"\xed\xa0\x80"],
    ["everystep_resolve_step", UNKNOWN.encode(), b"\xff", "--discard"],
    ["everystep_prune", "--older-than", b"\xff"],
]


@pytest.mark.parametrize("argv", SHELL_CASES, ids=[case[0] for case in SHELL_CASES])
def test_arguments_that_are_not_utf8_exit_1_with_one_line(history, argv):
    """From a real shell, argument bytes that are not UTF-8 (Python reads them as lone
    surrogates) end the command with status 1 and one CommandError line on stderr."""
    before = recorded()
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *argv],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        timeout=120,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1, stderr
    assert stderr.startswith("CommandError: ") and stderr.count("\n") == 1, stderr
    assert recorded() == before


@pytest.mark.backends("sqlite")
def test_show_prints_a_legacy_row_with_a_lone_surrogate(history):
    """SQLite stored lone surrogates as they were before values were escaped: from a
    shell, everystep_show still prints such a run (spelled out) and exits 0."""
    error = {"type": "builtins.ValueError", "message": "bad \udcff", "args": ["\udcff"]}
    run = Workflow.objects.create(name="legacy", args=["\udcff"], status="failed", error=error)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "everystep_show", str(run.id)],
        cwd=ROOT,
        env=worker_env() | {"PYTHONIOENCODING": "utf-8:strict"},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode()
    assert 'args          ["\\udcff"]' in out
    assert "error         builtins.ValueError: bad \\udcff" in out
