"""Log and terminal forging (issue 21 item 7): stored text (a workflow name, an event
name, an exception message, a result) cannot write a line that reads as another log
record or status line, nor send a terminal control sequence; the UI's notices come
from keys, never from text a URL carries."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

import everystep.ui
from everystep import logs, signals
from everystep.models import Status, Workflow
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)

FORGED = "\r\n2026-01-01 00:00:00,000 INFO everystep.ui run 1: cancel by admin"
ANSI = "\x1b[2J\x1b[H"
# A line of text output that starts where a record or a status line would.
RECORD_START = re.compile(r"^(\d{4}-\d\d-\d\d|\[completed\]|status)", re.MULTILINE)


def _text_lines(record: logging.LogRecord) -> list[str]:
    return logs.TextFormatter().format(record).split("\n")


def _finished_record(caplog: pytest.LogCaptureFixture, **kwargs: object) -> logging.LogRecord:
    with caplog.at_level(logging.INFO, logger="everystep.run"):
        signals.run_finished.emit(sender=Workflow, duration=0.0, exc=None, **kwargs)
    (record,) = [r for r in caplog.records if getattr(r, "event", "").startswith("run.")]
    return record


def test_text_log_escapes_controls_in_every_value(caplog):
    """A CR, LF or ANSI escape in a workflow name, an event name or an exception message
    stays on its record's one line in the text format, escaped."""
    try:
        raise ValueError("boom" + FORGED + ANSI)
    except ValueError:
        exc_info = sys.exc_info()
    record = _finished_record(
        caplog,
        run_id="r1",
        workflow="wf" + FORGED,
        runner="w1" + ANSI,
        status="failed",
        error={"type": "builtins.ValueError", "message": "boom" + FORGED + ANSI},
    )
    lines = _text_lines(record)
    assert len(lines) == 1 and "\x1b" not in lines[0] and "\r" not in lines[0]
    assert "wf\\r\\n2026-01-01" in lines[0] and "boom\\r\\n2026" in lines[0]
    ui = logging.getLogger("everystep.ui").makeRecord(
        "everystep.ui", logging.INFO, __file__, 1, "run %s: %s sent", ("r1", "ev" + FORGED), None
    )
    ui.exc_info = exc_info
    first, *rest = _text_lines(ui)
    assert "ev\\r\\n2026-01-01" in first and "\x1b" not in "".join(rest)
    # The traceback is the formatter's own block: every line behind the continuation mark.
    assert rest and all(line.startswith(logs.CONTINUATION) for line in rest)


def test_text_log_keeps_a_failed_runs_traceback_below_it(caplog):
    """A failed run's traceback follows its one line, each line behind the continuation
    mark, a control character in it escaped; JSON keeps the record one line."""
    record = _finished_record(
        caplog,
        run_id="r1",
        workflow="wf",
        runner="w1",
        status="failed",
        error={"type": "T", "message": "m", "traceback": "Traceback:\n  x" + ANSI + "\nT: m"},
    )
    first, *rest = _text_lines(record)
    assert first.endswith("run r1 (wf) failed: T: m")
    expected = ("Traceback:", "  x\\x1b[2J\\x1b[H", "T: m")
    assert rest == [logs.CONTINUATION + line for line in expected]
    assert "\n" not in logs.JsonFormatter().format(record)


@pytest.fixture
def forged_run() -> Workflow:
    """A failed run whose stored name, error, traceback and step hold control text."""
    run = Workflow.objects.create(
        name="wf" + ANSI,
        status=Status.FAILED,
        args=["a\r\n[completed]"],
        result=None,
        error={
            "type": "builtins.ValueError",
            "message": "bad" + ANSI + "\r\n[completed]",
            "traceback": "Traceback:\n  line" + ANSI + "\rstatus       completed\nValueError",
        },
        completed_at=timezone.now(),
    )
    now = timezone.now()
    run.steps.create(
        step_id="1" + ANSI,
        name="step\r\nstatus",
        status="done",
        result="ok\x1b[2J\r\n[completed]",
        started_at=now,
        finished_at=now,
    )
    return run


def test_show_prints_stored_control_characters_escaped(forged_run):
    """everystep_show of a run whose error, result, name and traceback hold "\\x1b[2J"
    and "\\r\\n[completed]" prints them escaped: no ESC, no CR, no forged line."""
    out = io.StringIO()
    call_command("everystep_show", str(forged_run.id), stdout=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert "bad\\x1b[2J\\x1b[H\\r\\n[completed]" in text
    assert "ok\\u001b[2J\\r\\n[completed]" in text  # the step's result, as JSON writes it
    assert "status       completed" not in text.splitlines()
    assert not [line for line in text.splitlines() if line.startswith("[completed]")]


def test_runs_and_json_print_stored_control_characters_escaped(forged_run):
    """everystep_runs (table and --json) and everystep_show --json send no control
    character of a stored value to the terminal."""
    for args in (["everystep_runs"], ["everystep_runs", "--json"], ["everystep_show", "--json"]):
        out = io.StringIO()
        extra = [str(forged_run.id)] if args[0] == "everystep_show" else []
        call_command(*args, *extra, stdout=out)
        assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue(), args


def test_a_refusal_quoting_stored_text_is_one_escaped_line(forged_run):
    """A command's refusal that quotes a stored name prints it escaped."""
    Workflow.objects.filter(id=forged_run.id).update(status=Status.RUNNING)
    from django.core.management import CommandError

    with pytest.raises(CommandError) as info:
        call_command("everystep_fork", str(forged_run.id), stdout=io.StringIO())
    assert "\x1b" not in str(info.value) and "\n" not in str(info.value)


SCRIPT = "<script>alert(1)</script>"
FREE_TEXT = "Done: cancel by admin, all runs deleted"


def test_notices_come_from_keys_never_from_the_url(client, forged_run):
    """?error=<script>… and ?done=free text show nothing of it on the run, runners and
    runs pages; an unknown key says nothing."""
    client.force_login(staff_user())
    pages = [
        reverse("everystep:run", args=[forged_run.id]),
        reverse("everystep:runners"),
        reverse("everystep:runs"),
    ]
    query = urlencode({"error": SCRIPT + FREE_TEXT, "done": FREE_TEXT, "runner": FREE_TEXT})
    for page in pages:
        html = client.get(f"{page}?{query}").content.decode()
        said = re.findall(r'class="es-notice"[^>]*>(.*?)</p>', html, re.S)
        assert not [text for text in said if "alert(1)" in text or "cancel by admin" in text]
        assert "<script>alert" not in html, page
    run_page = client.get(f"{pages[0]}?{query}").content.decode()
    assert "es-notice" not in run_page and "cancel by admin" not in run_page


def test_a_refused_action_redirects_with_a_key(client, forged_run):
    """A refused action comes back with a key (not the store's message), and the run
    page says the fixed text of that key."""
    client.force_login(staff_user("resolve_workflow"))
    url = reverse("everystep:run-action", args=[forged_run.id])
    response = client.post(url, {"action": "resolve", "step_id": SCRIPT, "mode": "discard"})
    assert response["Location"].endswith("?error=not-blocked")
    html = client.get(response["Location"]).content.decode()
    assert "That run is not blocked: only a blocked run&#x27;s step can be settled." in html
    assert "alert(1)" not in html


def test_no_mark_safe_in_the_ui_and_python_built_html_is_escaped(client, forged_run):
    """The UI builds HTML with format_html only (no mark_safe), and a step name, id and
    error holding <script> are escaped in the run page's rows and graph."""
    ui = Path(everystep.ui.__file__).parent
    assert not [path for path in ui.glob("*.py") if "mark_safe(" in path.read_text()]
    step = forged_run.steps.get()
    step.name, step.step_id = SCRIPT, SCRIPT
    step.status, step.error = "failed", {"type": SCRIPT, "message": SCRIPT, "traceback": SCRIPT}
    step.save()
    client.force_login(staff_user())
    html = client.get(reverse("everystep:run", args=[forged_run.id])).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
