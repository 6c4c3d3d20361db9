"""Statements on the PostgreSQL server's own ``postgres`` database, connecting directly
(never through PgBouncer: the pooler mode's "direct" alias when there is one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def execute(sql: str, params: Sequence[Any] = ()) -> None:
    import psycopg
    from django.conf import settings

    server = settings.DATABASES.get("direct", settings.DATABASES["default"])
    with psycopg.connect(
        host=server["HOST"],
        port=server["PORT"],
        user=server["USER"],
        password=server["PASSWORD"],
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(sql, params)
