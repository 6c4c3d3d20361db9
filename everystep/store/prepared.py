"""Whether the hot path's statements are prepared on the server (PostgreSQL).

A prepared statement is parsed and planned once per connection instead of on every
execution, which is most of what separates everystep's database CPU per run from the raw
limit's. It lives in the server session, so it is only safe where each connection keeps
its own server session: a direct connection, or a session-mode pooler. Through a
transaction-mode pooler the next execution may reach a server connection that never saw
it (PgBouncer before 1.21, or 1.21+ without ``max_prepared_statements``).

``EVERYSTEP_PREPARED_STATEMENTS``: ``True`` or ``False`` decides; unset (``None``) means
"where the connection is known to be a session of its own": a worker whose LISTEN on
everystep's own alias received its probe notification (``wake.Listener``) has shown that,
since a transaction-mode pooler cannot deliver one. Until then, and in every other
process, statements are not prepared.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from everystep import conf

_session_confirmed = False


def confirm_session(alias: str | None) -> None:
    """LISTEN over ``alias`` received its own notification: ``alias`` keeps a session."""
    global _session_confirmed
    if alias == conf.database():
        _session_confirmed = True


def enabled() -> bool:
    """Whether to prepare the hot path's statements on everystep's connection now."""
    setting = conf.prepared_statements()
    return _session_confirmed if setting is None else setting


# Django's default (None) turns preparing off for a whole connection, even for a statement
# that asks; a threshold no statement reaches lets exactly the ones that ask be prepared,
# and the project's own queries on the connection stay as Django made them.
_ONLY_WHEN_ASKED = 2**62
# Prepared statements kept per connection: old plans (``Plans``) are deallocated beyond it.
_KEPT = 32


def preparing_cursor(raw: Any) -> Any:
    """A psycopg cursor on ``raw`` that prepares every statement it runs."""
    if raw.prepare_threshold is None:
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    raw.prepared_max = min(raw.prepared_max, _KEPT)
    return _preparing_class()(raw)


@cache
def _preparing_class() -> type:
    import psycopg  # here: a MariaDB- or SQLite-only project need not have it

    class PreparingCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True)
            return super().execute(query, params, **kwargs)

    return PreparingCursor


class Plans:
    """When one connection's statements are prepared again, to be planned afresh.

    PostgreSQL plans a prepared statement for its first few executions, then keeps a
    generic plan until the tables' statistics change. A plan made while a table was
    nearly empty (a new deployment, a test database) scans it whole, and keeps doing so
    as it grows until autovacuum analyzes it, if it does: the claim's check for recorded
    steps, made when the steps table was empty, cost 1 ms per claim after 6,000 steps.
    So after 256 executions, then 8 times as many each time up to every 131,072, each
    statement is prepared under a new text: planned again for the tables as they are.
    """

    __slots__ = ("mark", "next", "uses")

    FIRST, GROWTH, EVERY = 256, 8, 131_072

    def __init__(self) -> None:
        self.uses = 0
        self.next = self.FIRST
        self.mark = ""

    def text(self, sql: str) -> str:
        """``sql`` as this connection prepares it now."""
        self.uses += 1
        if self.uses >= self.next:
            self.mark = f"\n/* plan {self.uses} */"
            self.next = self.uses + min(self.uses * (self.GROWTH - 1), self.EVERY)
        return sql + self.mark
