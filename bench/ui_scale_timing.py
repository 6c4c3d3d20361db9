"""The timing pass of ``ui_scale.py``: each page of ``PAGES`` through Django's test
client, each store query of ``QUERIES``, N times; median, p95 and the query plans."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from harness.results import RESULTS, append_result, loadavg, machine_info, source_info
from harness.server import retrying

WARMUP = 2
PLANS = Path(__file__).resolve().parent / "ui_scale_plans"
TARGET_MS = 200.0

# -- what is timed: update these tables as the views grow ---------------------------------
# (label, URL name, query parameters), the parameters those of the runs list on branch
# ui13 (search ``q``, ``created_after``/``created_before``, keyset ``older``/``newer``).
# Placeholders, filled by ``ui_scale_timing.context``: ``{big}`` the big run's id,
# ``{prefix}`` its first 8 hex digits, ``{key}`` an idempotency key, ``{name}`` the
# busiest workflow, ``{rare}`` the rarest, ``{runner}`` a runner, ``{deep}`` the id of
# the 600,000th newest run, ``{day_ago}`` one day before the newest run, ``{t0}`` and
# ``{t1}``: one day, 60 days before the newest run.
RUNS, RUN = "everystep:runs", "everystep:run"
DAY = {"created_after": "{t0}", "created_before": "{t1}"}
PAGES: list[tuple[str, str, dict[str, str]]] = [
    ("runs: first page", RUNS, {}),
    ("runs: status=failed", RUNS, {"status": "failed"}),
    ("runs: status=running", RUNS, {"status": "running"}),
    ("runs: status=blocked", RUNS, {"status": "blocked"}),
    ("runs: status=scheduled", RUNS, {"status": "scheduled"}),
    ("runs: status=completed", RUNS, {"status": "completed"}),
    ("runs: status=cancelled", RUNS, {"status": "cancelled"}),
    ("runs: status=stopped", RUNS, {"status": "stopped"}),
    ("runs: workflow (busiest)", RUNS, {"workflow": "{name}"}),
    ("runs: workflow (rare)", RUNS, {"workflow": "{rare}"}),
    ("runs: workflow unknown", RUNS, {"workflow": "no.such_workflow"}),
    ("runs: runner", RUNS, {"runner": "{runner}"}),
    ("runs: runner unknown", RUNS, {"runner": "runner-gone"}),
    ("runs: status+workflow (rare)", RUNS, {"status": "failed", "workflow": "{rare}"}),
    ("runs: status+runner", RUNS, {"status": "failed", "runner": "{runner}"}),
    ("runs: status+workflow+runner", RUNS, {"status": "failed", "workflow": "{name}",
                                            "runner": "{runner}"}),
    ("runs: last 24 h", RUNS, {"created_after": "{day_ago}"}),
    ("runs: one day, 60 days ago", RUNS, DAY),
    ("runs: created before, 59 days ago", RUNS, {"created_before": "{t1}"}),
    ("runs: one day + status=failed", RUNS, {**DAY, "status": "failed"}),
    ("runs: one day + workflow (busiest)", RUNS, {**DAY, "workflow": "{name}"}),
    ("runs: deep page (older than 600,000)", RUNS, {"older": "{deep}"}),
    ("runs: deep page + status=failed", RUNS, {"older": "{deep}", "status": "failed"}),
    ("runs: deep page, newer direction", RUNS, {"newer": "{deep}"}),
    ("search: full run id", RUNS, {"q": "{big}"}),
    ("search: id prefix (8 hex digits)", RUNS, {"q": "{prefix}"}),
    ("search: idempotency key", RUNS, {"q": "{key}"}),
    ("search: nothing found", RUNS, {"q": "no-such-key"}),
    ("search: id prefix + status=failed", RUNS, {"q": "{prefix}", "status": "failed"}),
    ("search: key + workflow (busiest)", RUNS, {"q": "{key}", "workflow": "{name}"}),
    ("run: big run (2,000 steps)", RUN, {}),
    ("run: big run, table page 10", RUN, {"steps": "10"}),
    ("run: big run, whole graph", RUN, {"graph": "all"}),
    ("run: big run, all steps", RUN, {"steps": "all"}),
    ("runners", "everystep:runners", {}),
]  # fmt: skip


def queries() -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    """Store statements timed on their own: a time window written on ``created_at``
    (no index) against the same window as a UUIDv7 id range, which the views use."""
    from everystep.models import Workflow

    runs = Workflow.objects.defer("args", "result", "error").order_by("-id")
    return [
        (
            "store: one day by created_at",
            lambda c: list(
                runs.filter(created_at__gte=c["t0_at"], created_at__lt=c["t1_at"])[:200]
            ),
        ),
        (
            "store: one day by id range",
            lambda c: list(runs.filter(id__gte=c["t0_id"], id__lt=c["t1_id"])[:200]),
        ),
    ]


def time_all(
    db: str, requests: int, source: Any, results: Path = RESULTS, plans: Path = PLANS
) -> None:
    """Time every page and query; print one table; write the plans of ``db``; append
    the figures to ``bench/results/ui_scale.jsonl``."""
    from django.core.signals import request_started
    from django.db import reset_queries
    from django.test import Client
    from django.urls import reverse

    # Each request would empty the query log the plans are read from.
    request_started.disconnect(reset_queries)
    values = retrying(context)
    client = Client()
    client.force_login(retrying(_staff))
    plans.mkdir(parents=True, exist_ok=True)
    for stale in plans.glob(f"{db}_*.txt"):  # a label may have been renamed since
        stale.unlink()
    info = machine_info()
    print(f"{'what':48} {'median ms':>10} {'p95 ms':>8} {'queries':>8}")
    figures: dict[str, dict[str, float]] = {}
    for label, url_name, params in PAGES:
        args = [values["big"]] if url_name == "everystep:run" else []
        url = reverse(url_name, args=args)
        given = {key: value.format(**values) for key, value in params.items()}

        def get(url: str = url, given: dict[str, str] = given) -> None:
            response = client.get(url, given)
            # A search that finds exactly one run redirects to its page.
            assert response.status_code in (200, 302), (url, given, response.status_code)

        figures[label] = _report(db, label, get, requests, plans)
    for label, query in queries():
        figures[label] = _report(db, label, functools.partial(query, values), requests, plans)
    info["loadavg_end"] = loadavg()
    append_result(
        {"kind": "ui_scale", "bench": "ui_scale", "db": db, "requests": requests}
        | {"source": source_info(source)}
        | info
        | {"pages": figures},
        results,
    )


def _report(
    db: str, label: str, action: Callable[[], Any], requests: int, plans: Path
) -> dict[str, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(WARMUP):
        retrying(action)
    with CaptureQueriesContext(connection) as captured:
        retrying(action)
    statements = [query["sql"] for query in captured.captured_queries]
    seconds = [retrying(lambda: _timed(action)) for _ in range(requests)]
    ms = sorted(s * 1000 for s in seconds)
    median = statistics.median(ms)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    flag = "" if p95 < TARGET_MS else "  MISSES 200 ms"
    print(f"{label:48} {median:10.1f} {p95:8.1f} {len(statements):8}{flag}",
          flush=True)  # fmt: skip
    retrying(lambda: _write_plans(db, label, statements, plans))
    return {"median_ms": round(median, 1), "p95_ms": round(p95, 1), "queries": len(statements)}


def _timed(action: Callable[[], Any]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _write_plans(db: str, label: str, statements: list[str], plans: Path) -> None:
    from django.db import connection

    # Only everystep's own tables: the session and user lookups are Django's.
    mine = [sql for sql in statements if "everystep_" in sql and sql.lstrip().startswith("SELECT")]
    explain = (
        "EXPLAIN (ANALYZE, BUFFERS) "
        if connection.vendor == "postgresql"
        else "ANALYZE FORMAT=JSON "
    )
    out = [f"# {label} ({db}): {len(mine)} statement(s) on everystep tables\n"]
    with connection.cursor() as cursor:
        for sql in mine:
            cursor.execute(explain + sql)
            plan = "\n".join(str(row[0]) for row in cursor.fetchall())
            out.append(f"\n## {sql}\n\n{plan}\n")
    name = "".join(c if c.isalnum() else "_" for c in label).strip("_")
    (plans / f"{db}_{name}.txt").write_text("".join(out), encoding="utf-8")


def _staff() -> Any:
    """A staff user holding ``everystep.view_workflow``, which every page needs."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user, _ = get_user_model().objects.get_or_create(
        username="scale-bench", defaults={"is_staff": True}
    )
    user.user_permissions.add(Permission.objects.get(codename="view_workflow"))
    return user


def context() -> dict[str, Any]:
    """The values the pages and queries are filled with, read from the database."""
    from django.db.models import Count, Max

    from everystep.models import Workflow

    big = Workflow.objects.get(name="scale.big_run", idempotency_key="big-run")
    by_name = Workflow.objects.values("name").annotate(n=Count("id")).order_by("-n")
    names = [row["name"] for row in by_name]
    keyed_runs = Workflow.objects.filter(idempotency_key__isnull=False).order_by("id")
    # The offsets are those of a million runs; a smaller database (a smoke run's) its last.
    keyed = keyed_runs[min(150_000, keyed_runs.count() - 1)]
    newest = Workflow.objects.aggregate(at=Max("created_at"))["at"]
    t0 = (newest - timedelta(days=60)).replace(microsecond=0)
    t1 = t0 + timedelta(days=1)
    deep_at = min(600_000, Workflow.objects.count() - 1)
    deep = Workflow.objects.order_by("-id").values_list("id", flat=True)[deep_at]
    return {
        "big": str(big.id),
        "prefix": big.id.hex[:8],
        "name": names[0],
        "rare": names[-1],
        "runner": "runner-a-1",
        "key": keyed.idempotency_key,
        "deep": str(deep),
        "day_ago": (newest - timedelta(days=1)).replace(microsecond=0).isoformat(),
        "t0": t0.isoformat(),
        "t1": t1.isoformat(),
        "t0_at": t0,
        "t1_at": t1,
        "t0_id": _time_bound(t0),
        "t1_id": _time_bound(t1),
    }


def _time_bound(moment: Any) -> UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond: ids at or after it are not older."""
    return UUID(int=int(moment.timestamp() * 1000) << 80)
