"""Count what a process sends to its database, on every thread, from inside the process.

``install()`` patches Django at class level (acceptable in a benchmark, never in the
library), so every connection of every thread is seen, which ``connection.execute_wrapper``
(one connection, one thread) cannot do for a worker's pool:

- ``CursorWrapper._execute`` / ``_executemany``: each SQL statement, by its first word
  (``select``, ``insert``, ``update``, ``delete``, ``savepoint``, ``release``, ``begin``…);
- ``BaseDatabaseWrapper.commit`` / ``rollback``: the end of an ``atomic`` block;
- ``BaseDatabaseWrapper.set_autocommit``: the start (``autocommit_off``) and end
  (``autocommit_on``) of a transaction;
- ``BaseDatabaseWrapper.connect`` / ``close``: connections opened and closed;
- the backend's ``is_usable``: ``CONN_HEALTH_CHECKS`` (PostgreSQL ``SELECT 1`` and MySQLdb
  ``ping`` bypass Django's cursors).

Counts are kept per thread group: ``loop`` (the worker's main thread: start-up, claims,
polls), ``pool`` (``everystep-run_*``: the passes), ``heartbeat`` and ``other``; see
``set_main_group`` for an embedded worker.

``round_trips()`` turns the counts into what reaches the server: the statements, the
commits and rollbacks, plus the transaction control the driver sends on its own
(psycopg sends ``BEGIN`` before the first statement of a transaction; MySQLdb sends
``SET autocommit`` both ways; Django's SQLite backend sends an explicit ``BEGIN``, already
counted as a statement).

In a worker subprocess, ``everystep_bench.apps`` calls ``install()`` and
``serve_snapshots(path)`` when ``EVERYSTEP_BENCH_COUNT_FILE`` is set; the benchmark then
sends ``SIGUSR1`` and reads the counts from that file (``request_snapshot``).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

SQL_KINDS = ("select", "insert", "update", "delete")
_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()
_trace: list[tuple[str, str, str]] | None = None
_installed = False
_snapshots = {"seq": 0}
_main_group = ["loop"]


def set_main_group(group: str) -> None:
    """Name the main thread's group: ``loop`` in a worker process (the default), something
    else in a benchmark that runs an embedded worker on a thread named ``everystep-loop``."""
    _main_group[0] = group


def thread_group(name: str) -> str:
    if name == "MainThread":
        return _main_group[0]
    if name.startswith("everystep-loop"):
        return "loop"
    if name.startswith("everystep-run"):
        return "pool"
    if name.startswith("everystep-heartbeat"):
        return "heartbeat"
    return "other"


def statement_kind(sql: str) -> str:
    words = sql.lstrip(" (\n\t").split(None, 2)
    if not words:
        return "other"
    first = words[0].lower()
    if first == "rollback" and len(words) > 1 and words[1].lower() == "to":
        return "rollback_to"
    if first in {*SQL_KINDS, "savepoint", "release", "begin", "set", "with"}:
        return first
    return "other"


def _note(kind: str, sql: str = "") -> None:
    group = thread_group(threading.current_thread().name)
    with _lock:
        _counts[group, kind] += 1
        if _trace is not None:
            _trace.append((group, kind, " ".join(sql.split())))


def install() -> None:
    """Patch Django's cursor and connection classes to count (idempotent)."""
    global _installed
    if _installed:
        return
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    def counting_statement(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(sql)
            _note(statement_kind(text), text)
            return method(self, sql, *args, **kwargs)

        return wrapper

    def counting(method: Callable[..., Any], kind: Callable[..., str]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            _note(kind(*args, **kwargs))
            return method(self, *args, **kwargs)

        return wrapper

    cursor: Any = CursorWrapper
    cursor._execute = counting_statement(cursor._execute)
    cursor._executemany = counting_statement(cursor._executemany)
    base: Any = BaseDatabaseWrapper
    base.commit = counting(base.commit, lambda: "commit")
    base.rollback = counting(base.rollback, lambda: "rollback_tx")
    base.connect = counting(base.connect, lambda: "connect")
    base.close = counting(base.close, lambda: "close")
    base.set_autocommit = counting(
        base.set_autocommit,
        lambda autocommit, *_, **__: "autocommit_on" if autocommit else "autocommit_off",
    )
    backend: Any = type(connections["default"])
    backend.is_usable = counting(backend.is_usable, lambda: "health_check")
    _installed = True


def reset() -> None:
    with _lock:
        _counts.clear()


def snapshot() -> dict[str, int]:
    """``{"group:kind": count}`` since the last ``reset()``."""
    with _lock:
        return {f"{group}:{kind}": n for (group, kind), n in sorted(_counts.items())}


def start_trace() -> None:
    global _trace
    with _lock:
        _trace = []


def stop_trace() -> list[tuple[str, str, str]]:
    """The ``(thread group, kind, sql)`` of every call since ``start_trace()``."""
    global _trace
    with _lock:
        trace, _trace = _trace or [], None
    return trace


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    keys = set(after) | set(before)
    return {
        k: after.get(k, 0) - before.get(k, 0)
        for k in sorted(keys)
        if after.get(k, 0) != before.get(k, 0)
    }


def by_kind(counts: dict[str, int], group: str | None = None) -> Counter[str]:
    """Counts summed over thread groups (or for one group), by kind."""
    totals: Counter[str] = Counter()
    for key, n in counts.items():
        g, kind = key.split(":", 1)
        if group is None or g == group:
            totals[kind] += n
    return totals


def round_trips(kinds: Counter[str], vendor: str) -> dict[str, int]:
    """``sql`` (SELECT/INSERT/UPDATE/DELETE), ``tx`` (transaction control reaching the
    server: BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, SET autocommit), ``other`` (other
    statements, health checks), their ``total``, and ``connects`` (connections opened,
    whose set-up statements are not counted here)."""
    sql = sum(kinds[k] for k in SQL_KINDS) + kinds["with"]
    tx = sum(kinds[k] for k in ("commit", "rollback_tx", "savepoint", "release", "rollback_to"))
    tx += kinds["begin"]  # SQLite: Django's explicit BEGIN
    if vendor == "postgresql":
        tx += kinds["autocommit_off"]  # psycopg's BEGIN before the first statement
    elif vendor == "mysql":
        tx += kinds["autocommit_off"] + kinds["autocommit_on"]  # SET autocommit=0 / =1
    other = kinds["set"] + kinds["other"]
    if vendor in ("postgresql", "mysql"):
        other += kinds["health_check"]  # SELECT 1 / ping
    return {
        "sql": sql,
        "tx": tx,
        "other": other,
        "total": sql + tx + other,
        "connects": kinds["connect"],
    }


# -- snapshots for a worker subprocess -------------------------------------------------


def serve_snapshots(path: str) -> None:
    """Write the counts to ``path`` now and on every ``SIGUSR1`` (main thread only)."""

    def write(*_: Any) -> None:
        _snapshots["seq"] += 1
        payload = {"seq": _snapshots["seq"], "pid": os.getpid(), "counts": snapshot()}
        tmp = f"{path}.tmp"
        Path(tmp).write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, path)

    signal.signal(signal.SIGUSR1, write)
    write()


def read_snapshot(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {"seq": -1, "counts": {}}


def request_snapshot(pid: int, path: Path, timeout: float = 10.0) -> dict[str, int]:
    """Ask the worker ``pid`` for its counts and wait for them."""
    before = read_snapshot(path)["seq"]
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = read_snapshot(path)
        if current["seq"] > before:
            return dict(current["counts"])
        time.sleep(0.01)
    raise TimeoutError(f"worker {pid} did not write its statement counts to {path}")
