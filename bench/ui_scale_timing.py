"""The timing pass of ``ui_scale.py``: each page of ``PAGES`` through Django's test
client, each store query of ``QUERIES``, N times; median, p95 and the query plans."""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from ui_scale import PAGES, PLANS, TARGET_MS, queries, retrying

WARMUP = 2


def time_all(db: str, requests: int, source: Any) -> None:
    """Time every page and query; print one table; write the plans of ``db``; append
    the figures to ``bench/results.jsonl``."""
    from django.core.signals import request_started
    from django.db import reset_queries
    from django.test import Client
    from django.urls import reverse
    from harness import append_result, machine_info, source_info

    # Each request would empty the query log the plans are read from.
    request_started.disconnect(reset_queries)
    values = retrying(context)
    client = Client()
    client.force_login(retrying(_staff))
    PLANS.mkdir(exist_ok=True)
    for stale in PLANS.glob(f"{db}_*.txt"):  # a label may have been renamed since
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

        figures[label] = _report(db, label, get, requests)
    for label, query in queries():
        figures[label] = _report(db, label, functools.partial(query, values), requests)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    append_result(
        {"bench": "ui_scale", "db": db, "requests": requests, "source": source_info(source)}
        | info
        | {"pages": figures}
    )


def _report(db: str, label: str, action: Callable[[], Any], requests: int) -> dict[str, float]:
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
    retrying(lambda: _write_plans(db, label, statements))
    return {"median_ms": round(median, 1), "p95_ms": round(p95, 1), "queries": len(statements)}


def _timed(action: Callable[[], Any]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _write_plans(db: str, label: str, statements: list[str]) -> None:
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
    (PLANS / f"{db}_{name}.txt").write_text("".join(out), encoding="utf-8")


def _staff() -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(
        username="scale-bench", defaults={"is_staff": True}
    )
    return user


def context() -> dict[str, Any]:
    """The values the pages and queries are filled with, read from the database."""
    from django.db.models import Count, Max

    from everystep.models import Workflow

    big = Workflow.objects.get(name="scale.big_run", idempotency_key="big-run")
    by_name = Workflow.objects.values("name").annotate(n=Count("id")).order_by("-n")
    names = [row["name"] for row in by_name]
    keyed = Workflow.objects.filter(idempotency_key__isnull=False).order_by("id")[150_000]
    newest = Workflow.objects.aggregate(at=Max("created_at"))["at"]
    t0 = (newest - timedelta(days=60)).replace(microsecond=0)
    t1 = t0 + timedelta(days=1)
    deep = Workflow.objects.order_by("-id").values_list("id", flat=True)[600_000]
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
