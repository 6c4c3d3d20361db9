"""Statements on the PostgreSQL server's own ``postgres`` database, connecting directly
(never through PgBouncer: the pooler mode's "direct" alias when there is one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def execute(sql: str, params: Sequence[Any] = ()) -> None:
    from django.conf import settings

    from tests.upgrade_load import connect

    server = settings.DATABASES.get("direct", settings.DATABASES["default"])
    with connect("postgresql", server, "postgres") as conn:
        conn.execute(sql, params)
