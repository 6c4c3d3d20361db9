"""What runs publish, where on-call looks: the run page's "Published" section, the runs
list's ``?show=KEY`` column and ``everystep_show``."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime
from html import unescape
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from everystep import publish, schedule, serde, step, workflow
from everystep.models import Status, Workflow
from everystep.store import published
from everystep.testing import run_due
from everystep.ui.progress import CELL_SHOWN, VALUE_SHOWN
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "<script>alert(1)</script>"


@step
def count_rows(n: int) -> int:
    for done in range(1, n + 1):
        publish("rows", done)
    return n


@workflow
def publishing_import(n: int) -> int:
    publish("stage", "counting")
    total = count_rows(n)
    publish("stage", "done")
    return total


def make_run(status: str = Status.RUNNING, **values: Any) -> Workflow:
    run = Workflow.objects.create(name="wf.progress", status=status, args=[])
    for key, value in values.items():
        published.write(run.id, key, serde.encode(value))
    return run


@pytest.fixture
def staff(client: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


def page(client: Any, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def run_page(client: Any, run: Workflow, **params: str) -> str:
    return page(client, reverse("everystep:run", args=[run.id]), **params)


def runs_page(client: Any, **params: str) -> str:
    return page(client, reverse("everystep:runs"), **params)


def published_section(html: str) -> str:
    start = html.index('<h2 id="published">')
    return html[start : html.index("</table>", start)]


def cells(html: str, run: Workflow) -> list[str]:
    """The cells of ``run``'s row in the runs list."""
    row = re.search(rf'<tr>\s*<td><a class="es-id" href="[^"]+">{run.id}</a>.*?</tr>', html, re.S)
    assert row is not None, run.id
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)


def notices(html: str) -> list[str]:
    return re.findall(r'<p class="es-notice" role="status">(.*?)</p>', html, re.S)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("everystep_show", *args, stdout=out)
    return out.getvalue()


# --- the run page --------------------------------------------------------------------


def test_run_page_shows_published_values_escaped(staff):
    """Each key and its value as compact JSON, in key order; markup in a value is text."""
    run = make_run(stage="loading", rows={"done": 3, "of": 10}, note=SCRIPT)
    section = published_section(run_page(staff, run))
    keys = re.findall(r"<tr><td><code>([^<]*)</code></td>", section)
    assert keys == ["note", "rows", "stage"]
    assert '<code class="es-value">{&quot;done&quot;:3,&quot;of&quot;:10}</code>' in section
    assert "&quot;loading&quot;" in section
    assert SCRIPT not in section
    assert "&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in section


def test_run_page_without_published_values_has_no_section(staff):
    """A run that published nothing shows no Published section."""
    html = run_page(staff, make_run())
    assert 'id="published"' not in html


def test_run_page_cuts_a_long_value_and_folds_the_whole(staff):
    """A value longer than a line is cut with an ellipsis; all of it is folded under."""
    long = "x" * 5000
    section = published_section(run_page(staff, make_run(blob=long)))
    line = re.search(r'<code class="es-value">([^<]*)</code>', section)
    assert line is not None
    shown = unescape(line.group(1))
    assert len(shown) == VALUE_SHOWN and shown.endswith("…")
    assert f'<pre class="es-json">&quot;{long}&quot;</pre>' in section


def test_run_page_shows_values_that_are_not_json_in_their_stored_form(staff):
    """A datetime published is shown as it is stored (a tagged object), as step results
    are: the page decodes nothing, so it imports nothing a stored value names."""
    moment = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
    section = unescape(published_section(run_page(staff, make_run(at=moment))))
    assert '"v":"2026-05-01T12:30:00+00:00"' in section and '"__es__":"datetime"' in section


def test_a_fork_shows_its_origins_values(staff):
    """A fork that published nothing yet shows the values of the run it was forked from."""
    origin = make_run(Status.FAILED, stage="half way")
    fork = Workflow.objects.create(
        name="wf.progress", status=Status.SCHEDULED, args=[], forked_from=origin
    )
    assert "&quot;half way&quot;" in published_section(run_page(staff, fork))


def test_a_live_run_offers_the_auto_refresh(staff):
    """A run that is not final links to the auto-refresh that keeps its values up to
    date; with it on, the page refreshes itself and the link is gone; a final run has
    no link."""
    live = make_run(Status.RUNNING, stage="loading")
    html = run_page(staff, live)
    assert '<a href="?refresh=1#published">Auto-refresh every 5 s</a>' in html
    assert '<meta http-equiv="refresh"' not in html
    html = run_page(staff, live, refresh="1", steps="1")
    assert '<meta http-equiv="refresh" content="5">' in html
    assert "Auto-refresh every 5 s</a>" not in html
    final = make_run(Status.COMPLETED, stage="done")
    assert "Auto-refresh every 5 s</a>" not in run_page(staff, final)


def test_a_refreshed_page_shows_the_latest_value(staff):
    """Each load of the page reads the values again: a new value replaces the old one."""
    run = make_run(stage="loading")
    assert "&quot;loading&quot;" in published_section(run_page(staff, run, refresh="1"))
    published.write(run.id, "stage", serde.encode("saving"))
    section = published_section(run_page(staff, run, refresh="1"))
    assert "&quot;saving&quot;" in section and "loading" not in section


def test_values_published_by_a_real_run_are_shown(staff):
    """A workflow that publishes from its body and its step: its page shows the last
    values, and everystep_show prints them."""
    run_id = schedule(publishing_import, 30).id
    run_due()
    run = Workflow.objects.get(id=run_id)
    assert run.status == Status.COMPLETED
    section = published_section(run_page(staff, run))
    assert '<code>rows</code></td><td><code class="es-value">30</code>' in section
    assert '<code>stage</code></td><td><code class="es-value">&quot;done&quot;</code>' in section
    out = command(str(run_id))
    assert 'published:\n  rows: 30\n  stage: "done"\n' in out


# --- the runs list -------------------------------------------------------------------


def test_show_adds_one_column_with_each_runs_value(staff):
    """``?show=stage``: a column headed by the key, each run's value escaped, empty for a
    run without that key; without ``show`` the table is as it was."""
    loading = make_run(stage="loading", rows=5)
    scripted = make_run(stage=SCRIPT)
    silent = make_run()
    plain = runs_page(staff)
    assert len(cells(plain, loading)) == 8
    html = runs_page(staff, show="stage")
    assert '<th scope="col"><code>stage</code></th>' in html
    assert cells(html, loading)[-1] == '<code class="es-value">&quot;loading&quot;</code>'
    assert cells(html, scripted)[-1] == (
        '<code class="es-value">&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;</code>'
    )
    assert cells(html, silent)[-1] == '<code class="es-value"></code>'
    assert SCRIPT not in html
    assert len(cells(html, loading)) == 9


def test_show_cuts_a_long_value(staff):
    """A long value is cut to a cell's width."""
    run = make_run(stage="y" * 1000)
    cell = cells(runs_page(staff, show="stage"), run)[-1]
    shown = unescape(re.sub(r"<[^>]+>", "", cell))
    assert len(shown) == CELL_SHOWN and shown.endswith("…")


def test_show_reads_the_column_once_per_page(staff):
    """One read of the published values for the whole page, however many runs it lists."""

    def reads(count: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            runs_page(staff, show="stage")
        return sum("everystep_published" in q["sql"] for q in captured.captured_queries)

    make_run(stage="a")
    one = reads(1)
    for n in range(40):
        make_run(stage=f"s{n}")
    assert one == reads(41) == 1


@pytest.mark.parametrize(
    "key",
    ["has space", "a.b", "123", "x" * 201, "nul\x00"],
    ids=["space", "dot", "digits", "long", "nul"],
)
def test_a_bad_show_key_is_a_notice_not_an_error(staff, key):
    """A key ``publish`` would refuse: the page says so and shows no extra column."""
    run = make_run(stage="loading")
    html = runs_page(staff, show=key)
    assert any(text.startswith("No column for ") for text in notices(html)), notices(html)
    assert len(cells(html, run)) == 8


def test_show_is_carried_by_the_pages_links(staff):
    """Status links, paging links and the filter form keep the column."""
    for n in range(205):
        make_run(stage=f"s{n}")
    html = runs_page(staff, show="stage", status="running")
    links = re.findall(r'href="(/[^"]*\?[^"]*)"', html)
    status_links = [link for link in links if "status=" in link]
    assert status_links and all("show=stage" in link for link in status_links)
    older = re.search(r'<a rel="next" href="([^"]+)"', html)
    assert older is not None and "show=stage" in older.group(1)
    assert 'name="show" value="stage"' in html
    following = page(staff, older.group(1).replace("&amp;", "&"))
    assert '<th scope="col"><code>stage</code></th>' in following


# --- everystep_show ------------------------------------------------------------------


def test_show_command_prints_published_values():
    """A "published:" block, one ``key: json`` line per key in key order."""
    run = make_run(stage="loading", rows={"done": 3}, note=SCRIPT)
    out = command(str(run.id))
    assert (
        'published:\n  note: "<script>alert(1)</script>"\n  rows: {"done": 3}\n  stage: "loading"\n'
    ) in out
    assert out.index("published:") < out.index("steps (0):")


def test_show_command_prints_nothing_for_no_values():
    """A run that published nothing has no "published:" block, and --json an empty one."""
    run = make_run()
    assert "published" not in command(str(run.id))
    assert json.loads(command(str(run.id), "--json"))["published"] == {}


def test_show_command_json_has_the_values():
    """--json has a "published" object, values in their stored form as results are."""
    moment = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
    run = make_run(stage="loading", at=moment)
    data = json.loads(command(str(run.id), "--json"))
    assert data["published"] == {"at": serde.encode(moment), "stage": "loading"}


def test_show_command_cuts_and_escapes_a_long_value():
    """A long value prints on one line, cut; control characters are escaped."""
    run = make_run(blob="z" * 5000, bell="\x1b[31m")
    out = command(str(run.id))
    line = next(text for text in out.splitlines() if text.startswith("  blob: "))
    assert len(line) < 2100 and "--json prints all" in line
    assert "\x1b" not in out
