"""The runs page at scale: the search box, keyset paging, the time window, filters
combined, and bounded counts. (Requeueing a dead runner's runs: test_ui_actions.)"""

from __future__ import annotations

import html as htmllib
import os
import re
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep.models import Status, Workflow
from everystep.store import reports
from everystep.ui import views
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = reverse("everystep:runs")
BACKEND = os.environ.get("EVERYSTEP_TEST_DB", "sqlite")


def id_at(moment: datetime, tail: int | None = None) -> uuid.UUID:
    """A UUIDv7 made at ``moment``: its 48-bit millisecond time, version 7, the RFC
    variant, and ``tail`` (random if None) in the 74 bits that are left."""
    ms = int(moment.timestamp() * 1000)
    rest = uuid.uuid4().int if tail is None else tail
    rand_a, rand_b = (rest >> 62) & 0xFFF, rest & ((1 << 62) - 1)
    return uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)


def make_run(
    run_id: uuid.UUID | None = None,
    status: str = Status.COMPLETED,
    name: str = "wf.a",
    **fields: Any,
) -> Workflow:
    made = {"id": run_id} if run_id is not None else {}
    return Workflow.objects.create(name=name, status=status, args=[1], **made, **fields)


def listed_ids(html: str) -> list[str]:
    return re.findall(r'class="es-id" href="[^"]+">([0-9a-f-]{36})<', html)


def notices(html: str) -> list[str]:
    return [
        htmllib.unescape(text) for text in re.findall(r'class="es-notice"[^>]*>(.*?)</p>', html)
    ]


def link(html: str, rel: str) -> str | None:
    """The href of the page's ``rel`` (next: older, prev: newer) paging link."""
    found = re.search(rf'<a rel="{rel}" href="([^"]+)"', html)
    return htmllib.unescape(found.group(1)) if found else None


def page(client: Client, url: str = "", **params: str) -> str:
    """The runs page at ``url`` (a link's href, or a query string), or with ``params``."""
    response = client.get(url if url.startswith("/") else RUNS + url, params)
    assert response.status_code == 200, (response.status_code, response.get("Location"))
    return response.content.decode()


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(staff_user())
    return client


# --- search --------------------------------------------------------------------------


def assert_opens(client: Client, text: str, run: Workflow) -> None:
    response = client.get(RUNS, {"q": text})
    assert response.status_code == 302, (text, response.status_code)
    assert response["Location"] == reverse("everystep:run", args=[run.id])


def test_full_id_opens_the_run_with_or_without_dashes(staff):
    """A full run id, as shown, without dashes, in capitals or padded with spaces, opens
    that run's page."""
    run, _other = make_run(), make_run()
    for text in (str(run.id), run.id.hex, str(run.id).upper(), f"  {run.id}\n"):
        assert_opens(staff, text, run)


def test_unique_prefix_opens_the_run(staff):
    """An id prefix of 8 or more hex digits that only one run has opens it, dashes or not."""
    now = timezone.now()
    run = make_run(id_at(now - timedelta(days=3)))
    make_run(id_at(now))
    assert_opens(staff, run.id.hex[:8], run)
    assert_opens(staff, str(run.id)[:14], run)  # "0190a8e2-7b3c-"
    assert_opens(staff, run.id.hex[:20].upper(), run)


def test_a_single_hit_is_answered_without_counting(staff):
    """Opening the one run found costs the search alone: no status is counted."""
    from django.test.utils import CaptureQueriesContext

    run = make_run(idempotency_key="order-4712")
    with CaptureQueriesContext(connection) as queries:
        assert_opens(staff, "order-4712", run)
    counting = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counting == []


def test_idempotency_key_opens_the_run(staff):
    """An idempotency key, matched exactly, opens the run that has it."""
    run = make_run(idempotency_key="order-4711")
    make_run(idempotency_key="order-47110")
    assert_opens(staff, "order-4711", run)
    html = page(staff, q="order-471")
    assert listed_ids(html) == []
    assert "No run matches 'order-471'" in " ".join(notices(html))


def test_ambiguous_prefix_lists_exactly_the_matches(staff):
    """A prefix several runs share lists those runs, newest first, and no other: not the
    runs just below or just above the prefix's range."""
    base = id_at(timezone.now()).int & ~((1 << 96) - 1)  # the first 8 hex digits kept
    inside = [make_run(uuid.UUID(int=base | (0x7 << 76) | offset)) for offset in (5, 9, 1 << 70)]
    below = make_run(uuid.UUID(int=base - 1))
    above = make_run(uuid.UUID(int=base + (1 << 96)))
    prefix = f"{base >> 96:08x}"
    html = page(staff, q=prefix)
    assert listed_ids(html) == [str(run.id) for run in sorted(inside, key=lambda r: r.id.int)][::-1]
    assert str(below.id) not in html and str(above.id) not in html


def test_key_and_prefix_hits_are_listed_together(staff):
    """A text that is an id prefix of one run and the idempotency key of others lists all
    of them; the same key under two workflow names lists both."""
    run = make_run()
    prefix = run.id.hex[:10]
    by_key = [make_run(name=name, idempotency_key=prefix) for name in ("wf.a", "wf.b")]
    html = page(staff, q=prefix)
    assert sorted(listed_ids(html)) == sorted(str(r.id) for r in [run, *by_key])


def test_no_hit_lists_nothing_with_a_message(staff):
    """A well-formed id no run has, or a text that is neither id nor key, answers 200 with
    "no run matches" and an empty list."""
    make_run()
    for text in (str(uuid.uuid4()), "ffffffff", "no-such-order", "0190a8"):
        html = page(staff, q=text)
        assert listed_ids(html) == [], text
        assert any(n.startswith("No run matches") for n in notices(html)), text
    assert "at least 8 hex digits" in " ".join(notices(page(staff, q="0190a8")))
    assert "hex digits" not in " ".join(notices(page(staff, q="order")))


@pytest.mark.parametrize(
    "raw",
    ["%00", "abc%00def", "%FF%FE", "%ED%A0%80", quote("x" * 1_000_000), "0190a8e2" * 5, "%20"],
)
def test_bad_search_input_answers_200_with_a_message(staff, raw):
    """A NUL, bytes that are not UTF-8, a megabyte, a hex string longer than an id, or
    blanks: 200, never 500, a short page, and a message where something was searched."""
    make_run()
    response = staff.get(f"{RUNS}?q={raw}")
    assert response.status_code == 200
    html = response.content.decode()
    assert len(html) < 100_000
    if raw == "%20":  # blanks are no search: the list as usual
        assert len(listed_ids(html)) == 1 and notices(html) == []
    else:
        assert listed_ids(html) == []
        assert any("no run matches" in n.lower() for n in notices(html)), notices(html)


def test_search_box_is_on_every_page(staff):
    """The top bar of every page has the search form, labelled, sending q to the list."""
    run = make_run()
    for url in (RUNS, reverse("everystep:runners"), reverse("everystep:run", args=[run.id])):
        html = staff.get(url).content.decode()
        form = re.search(r'<form class="es-search" role="search"[^>]*>(.*?)</form>', html, re.S)
        assert form is not None, url
        assert f'action="{RUNS}"' in form.group(0)
        assert '<label for="es-find">' in form.group(1) and 'id="es-find"' in form.group(1)
        assert 'name="q"' in form.group(1)


def plan(queryset: Any) -> str:
    if BACKEND == "postgres":
        # On a table this small a sequential scan is cheaper; the question is whether
        # the index can serve the query at all.
        with connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
        try:
            return queryset.explain()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET enable_seqscan = on")
    return queryset.explain()


def test_prefix_search_is_a_primary_key_range_and_key_search_uses_its_index():
    """The prefix becomes ``id >= low AND id < high`` (never LIKE on a cast), which the
    database answers from the primary key; the key lookup uses the key's index."""
    for _ in range(50):
        make_run(idempotency_key=uuid.uuid4().hex)
    by_key, by_id = reports.search_parts(Workflow.objects.all(), "0190a8e27b3c")
    sql = str(by_id.query).upper()
    assert "LIKE" not in sql and "CAST" not in sql and ">=" in sql and "<" in sql
    id_plan, key_plan = plan(by_id.order_by("-id")[:201]), plan(by_key.order_by("-id")[:201])
    if BACKEND == "sqlite":
        assert re.search(r"SEARCH .*USING (PRIMARY KEY|INDEX sqlite_autoindex)", id_plan), id_plan
    elif BACKEND == "postgres":
        assert "everystep_workflow_pkey" in id_plan, id_plan
    else:
        assert re.search(r"\brange\b.*\bPRIMARY\b", id_plan), id_plan
    assert "everystep_wf_key" in key_plan, key_plan


def test_prefix_ranges_cover_exactly_the_prefix():
    """The range of a prefix holds every id that starts with it and nothing else."""
    low, high = reports.id_prefix_range("0190a8e2")
    assert low == uuid.UUID("0190a8e2-0000-0000-0000-000000000000")
    assert high == uuid.UUID("0190a8e3-0000-0000-0000-000000000000")
    assert reports.id_prefix_range("f" * 8) == (uuid.UUID("ffffffff" + "0" * 24), None)
    full = uuid.uuid4()
    assert reports.id_prefix_range(full.hex) == (full, uuid.UUID(int=full.int + 1))
    assert reports.id_digits("0190A8E2-7B") == "0190a8e27b"
    assert [reports.id_digits(t) for t in ("0190a8e", "0190a8eg", "0" * 33)] == [None] * 3


# --- paging ----------------------------------------------------------------------------


def test_paging_keeps_its_place_while_new_runs_arrive(staff):
    """Older/newer links walk the list by id: with runs inserted between page loads, no
    older run is shown twice or skipped, and newer leads back up to the new ones."""
    Workflow.objects.bulk_create(Workflow(name="wf.bulk", args=[]) for _ in range(450))
    everything = [str(i) for i in Workflow.objects.order_by("-id").values_list("id", flat=True)]

    first = page(staff)
    assert listed_ids(first) == everything[:200]
    assert link(first, "prev") is None and "Newest</a>" not in first
    arrived = [str(make_run(name="wf.new").id) for _ in range(3)]
    second = page(staff, link(first, "next"))
    assert listed_ids(second) == everything[200:400]
    arrived += [str(make_run(name="wf.new").id) for _ in range(2)]
    third = page(staff, link(second, "next"))
    assert listed_ids(third) == everything[400:]
    assert link(third, "next") is None
    seen = listed_ids(first) + listed_ids(second) + listed_ids(third)
    assert seen == everything  # each once, in order, none of the new ones among them

    back = page(staff, link(third, "prev"))
    assert listed_ids(back) == everything[200:400]
    top = page(staff, link(back, "prev"))
    assert listed_ids(top) == everything[:200]
    newest = page(staff, link(top, "prev"))  # the five that arrived meanwhile
    assert listed_ids(newest) == arrived[::-1]
    assert link(newest, "prev") is None and link(newest, "next") is not None
    assert listed_ids(page(staff)) == (arrived[::-1] + everything)[:200]


def test_paging_never_uses_offset(staff):
    """The next page is asked for by id (keyset), never with OFFSET."""
    from django.test.utils import CaptureQueriesContext

    Workflow.objects.bulk_create(Workflow(name="wf.bulk", args=[]) for _ in range(210))
    first = page(staff)
    with CaptureQueriesContext(connection) as queries:
        second = page(staff, link(first, "next"))
    assert len(listed_ids(second)) == 10
    listing = [q["sql"] for q in queries.captured_queries if "everystep_workflow" in q["sql"]]
    assert listing and not any("OFFSET" in sql.upper() for sql in listing), listing


def test_bad_paging_positions_are_ignored_with_a_notice(staff):
    """A cursor that is not a run id is ignored with a notice: the newest page shows."""
    run = make_run()
    for raw in ("nope", "%00", quote("x" * 100_000)):
        html = page(staff, f"?older={raw}")
        assert listed_ids(html) == [str(run.id)]
        assert any("paging position" in n for n in notices(html))


def test_a_page_past_the_oldest_run_links_to_the_newest(staff):
    """A cursor below every run (the rest was pruned) shows no runs, no older or newer
    link, and a link to the newest page."""
    run = make_run()
    html = page(staff, older=str(uuid.UUID(int=run.id.int - 1)))
    assert listed_ids(html) == []
    assert link(html, "next") is None and link(html, "prev") is None
    assert f'<a href="{RUNS}">Newest</a>' in html


def test_links_back_to_the_newest_page_drop_the_cursor(staff):
    """From a later page, "Newest" and the "all" count link lead to the first page even
    with no filter in use (an empty query string would keep the cursor)."""
    Workflow.objects.bulk_create(Workflow(name="wf.bulk", args=[]) for _ in range(201))
    second = page(staff, link(page(staff), "next"))
    newest = re.search(r'<a href="([^"]*)">Newest</a>', second)
    everything = re.search(r'<a href="([^"]*)"[^>]*>all</a>', second)
    assert newest is not None and everything is not None
    assert newest.group(1) == everything.group(1) == RUNS


# --- the time window -------------------------------------------------------------------


@pytest.fixture
def hours() -> dict[str, Workflow]:
    """Runs made at 09:00, 10:00 and 11:00 UTC on 2026-03-02."""
    day = datetime(2026, 3, 2, tzinfo=ZoneInfo("UTC"))
    return {f"{h}h": make_run(id_at(day + timedelta(hours=h))) for h in (9, 10, 11)}


def test_time_filter_takes_runs_created_in_the_window(staff, hours):
    """created_after (inclusive) and created_before (exclusive) bound the creation time,
    as the datetime-local field writes it, or as a date."""
    ids = {key: str(run.id) for key, run in hours.items()}
    after = page(staff, created_after="2026-03-02T09:30")
    assert listed_ids(after) == [ids["11h"], ids["10h"]]
    assert listed_ids(page(staff, created_after="2026-03-02T10:00")) == [ids["11h"], ids["10h"]]
    assert listed_ids(page(staff, created_before="2026-03-02T10:00")) == [ids["9h"]]
    window = page(staff, created_after="2026-03-02T09:30", created_before="2026-03-02T10:30")
    assert listed_ids(window) == [ids["10h"]]
    assert 'name="created_after" value="2026-03-02T09:30"' in window
    assert listed_ids(page(staff, created_before="2026-03-02")) == []
    assert len(listed_ids(page(staff, created_after="2026-03-02"))) == 3


def test_time_filter_reads_the_project_time_zone(staff, hours, settings):
    """A datetime-local value is a wall-clock time in settings.TIME_ZONE."""
    settings.TIME_ZONE = "Asia/Tokyo"  # UTC+9, no daylight saving
    html = page(staff, created_after="2026-03-02T19:00")  # 10:00 UTC
    assert listed_ids(html) == [str(hours["11h"].id), str(hours["10h"].id)]
    assert "Times are in Asia/Tokyo" in html


@pytest.mark.parametrize(
    "raw", ["yesterday", "2026-13-01", "%00", "9999-12-31T23:59-14:00", "x" * 50]
)
def test_bad_times_are_ignored_with_a_notice(staff, hours, raw):
    """A time that cannot be read is ignored with a notice; the page answers 200."""
    html = page(staff, created_after=raw)
    assert len(listed_ids(html)) == 3
    assert any("created after time" in n for n in notices(html)), notices(html)


def test_counts_follow_the_time_window_and_runner(staff, hours):
    """The per-status counts count the runs of the window (and runner) only."""
    make_run(
        id_at(datetime(2026, 3, 2, 10, 5, tzinfo=ZoneInfo("UTC"))), Status.FAILED, claimed_by="r1"
    )
    html = page(staff, created_after="2026-03-02T09:30")
    assert re.search(r'data-status="completed">2<', html)
    assert re.search(r'data-status="failed">1<', html)
    html = page(staff, runner="r1")
    assert re.search(r'data-status="completed">0<', html)
    assert re.search(r'data-status="failed">1<', html)


# --- everything together ---------------------------------------------------------------


def test_filters_combine_and_survive_paging(staff, monkeypatch):
    """Status, workflow, runner, time window and search narrow the list together, and the
    older/newer links carry every one of them."""
    monkeypatch.setattr(views, "RUNS_LIMIT", 2)
    # A start whose id ends its first 8 hex digits: they cover the next 65.536 s.
    aligned_ms = (
        int(datetime(2026, 5, 4, 12, tzinfo=ZoneInfo("UTC")).timestamp() * 1000) >> 16
    ) << 16
    start = datetime.fromtimestamp(aligned_ms / 1000, ZoneInfo("UTC"))
    minute = start.replace(second=0, microsecond=0)

    def at(seconds: float, **fields: Any) -> Workflow:
        wanted = {"status": Status.FAILED, "name": "wf.pay", "claimed_by": "r1"} | fields
        return make_run(id_at(start + timedelta(seconds=seconds)), **wanted)

    matching = [at(seconds) for seconds in (1, 5, 10, 20, 30)]
    at(2, status=Status.COMPLETED)
    at(3, name="wf.other")
    at(4, claimed_by="r2")
    at(-300)  # before the window
    at(70)  # in the window, past the prefix
    query = {
        "status": "failed",
        "workflow": "wf.pay",
        "runner": "r1",
        "created_after": f"{minute - timedelta(minutes=1):%Y-%m-%dT%H:%M}",
        "created_before": f"{minute + timedelta(minutes=3):%Y-%m-%dT%H:%M}",
        "q": matching[0].id.hex[:8],
    }
    assert all(run.id.hex.startswith(query["q"]) for run in matching)
    seen: list[str] = []
    html = page(staff, **query)
    while True:
        seen += listed_ids(html)
        older = link(html, "next")
        if older is None:
            break
        for key, value in query.items():
            assert f"{key}={quote(value, safe='')}" in older, (key, older)
        html = page(staff, older)
    assert seen == [str(run.id) for run in reversed(matching)]
    # Newer, from the last page, comes back with the same filters.
    assert listed_ids(page(staff, link(html, "prev"))) == seen[2:4]


def test_search_ignores_paging_redirect_only_on_the_first_page(staff):
    """A search that finds one run opens it; on a later page it stays a list."""
    run = make_run(idempotency_key="k-1")
    other = make_run()
    response = staff.get(RUNS, {"q": "k-1", "older": str(other.id)})
    assert response.status_code == 200
    assert listed_ids(response.content.decode()) == [str(run.id)]


# --- counts at scale -------------------------------------------------------------------


def test_counts_stop_at_ten_thousand_and_say_so(staff):
    """Past 10,000 runs of a status the page says "10,000+" instead of counting on."""
    Workflow.objects.bulk_create(
        (Workflow(name="wf.bulk", args=[]) for _ in range(reports.COUNT_CAP + 1)),
        batch_size=1000,
    )
    make_run(status=Status.FAILED)
    html = page(staff)
    assert 'data-status="scheduled">10,000+<' in html
    assert 'data-status="failed">1<' in html
    assert "Counts stop at 10,000." in html
