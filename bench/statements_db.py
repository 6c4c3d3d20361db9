"""Statements counted at the database for ``statements.py``: PostgreSQL's server log
(``log_statement = all`` on the benchmark database), MariaDB's ``SHOW GLOBAL STATUS``
deltas; nothing on SQLite (``DatabaseSide``: counted in process only)."""

from __future__ import annotations

import glob
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from everystep_bench import counting

BENCH_GROUP = "bench"  # this process's main thread, in the counts
MARIADB_STATUS = (
    "Questions",
    "Connections",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Com_begin",
    "Com_commit",
    "Com_rollback",
    "Com_set_option",
    "Com_savepoint",
    "Com_release_savepoint",
)


OWN_TO_STATUS = {
    "select": "Com_select",
    "insert": "Com_insert",
    "update": "Com_update",
    "delete": "Com_delete",
    "commit": "Com_commit",
    "rollback_tx": "Com_rollback",
    "autocommit_on": "Com_set_option",
    "autocommit_off": "Com_set_option",
    "savepoint": "Com_savepoint",
    "release": "Com_release_savepoint",
}


class DatabaseSide:
    """Counts at the database; ``None`` where this database cannot tell."""

    available = False
    note = "not counted at the database"

    def attach(self) -> None:
        """After this process reconnected."""

    def mark(self) -> Any:
        return None

    def since(self, mark: Any, own: dict[str, int]) -> dict[str, Any] | None:
        return None


class PostgresLog(DatabaseSide):
    """Statements the server logged for the benchmark database (``log_statement = all``),
    except this process's session."""

    LINE = re.compile(
        r"\[(?P<pid>\d+)\] \S*@(?P<db>\S+) LOG:  (?:statement|execute [^:]*): (?P<sql>.*)$"
    )

    def __init__(self, path: Path | None) -> None:
        from django.db import connection

        name = str(connection.settings_dict["NAME"])
        with connection.cursor() as cursor:
            cursor.execute("SHOW log_line_prefix")
            prefix = cursor.fetchone()[0]
        self.db = name
        self.own_pids: set[str] = set()
        self.path = path or self._find_log()
        if self.path is None or not os.access(self.path, os.R_OK):
            self.note = f"server log not readable ({self.path or 'not found'}): use --pg-log"
            return
        if "%p" not in prefix or "%d" not in prefix or "%u@%d" not in prefix:
            self.note = f"log_line_prefix {prefix!r} lacks [%p] and %u@%d"
            return
        with connection.cursor() as cursor:
            quoted = connection.ops.quote_name(name)
            cursor.execute(f"ALTER DATABASE {quoted} SET log_statement = 'all'")
        self.available = True
        self.attach()
        self.note = f"server log {self.path}, log_statement = all on {name}"

    def attach(self) -> None:
        """Leave this process's (new) session out of the log."""
        from django.db import connection

        if not self.available:
            return
        with connection.cursor() as cursor:
            cursor.execute("SET log_statement = 'none'")
            cursor.execute("SELECT pg_backend_pid()")
            self.own_pids.add(str(cursor.fetchone()[0]))

    @staticmethod
    def _find_log() -> Path | None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_logfile(), current_setting('server_version_num')")
            current, version = cursor.fetchone()
            cursor.execute("SHOW data_directory")
            data_directory = cursor.fetchone()[0]
        if current:
            return Path(data_directory) / current
        major = int(version) // 10000
        found = sorted(
            glob.glob(f"/var/log/postgresql/postgresql-{major}-*.log"), key=os.path.getmtime
        )
        return Path(found[-1]) if found else None

    def mark(self) -> Any:
        return self.path.stat().st_size if self.available and self.path else None

    def since(self, mark: Any, own: dict[str, int]) -> dict[str, Any] | None:
        if not self.available or self.path is None:
            return None
        time.sleep(0.3)  # the server writes its log as it goes; let it catch up
        with open(self.path, "rb") as log:
            log.seek(mark)
            text = log.read().decode(errors="replace")
        kinds: Counter[str] = Counter()
        in_transaction: dict[str, bool] = {}
        transactions = 0
        pids: set[str] = set()
        for line in text.splitlines():
            match = self.LINE.search(line)
            if not match or match["db"] != self.db or match["pid"] in self.own_pids:
                continue
            pid, kind = match["pid"], counting.statement_kind(match["sql"])
            if kind == "other" and match["sql"].lstrip().upper().startswith("COMMIT"):
                kind = "commit"
            if kind == "other" and match["sql"].lstrip().upper().startswith("ROLLBACK"):
                kind = "rollback_tx"
            kinds[kind] += 1
            pids.add(pid)
            if kind == "begin":
                in_transaction[pid] = True
                transactions += 1
            elif kind in ("commit", "rollback_tx"):
                in_transaction[pid] = False
            elif not in_transaction.get(pid):
                transactions += 1  # a statement in autocommit is a transaction of its own
        return {
            "statements": sum(kinds.values()),
            "transactions": transactions,
            "sessions_seen": len(pids),  # backends that sent something
            "kinds": dict(kinds.most_common()),
        }


class MariaDBStatus(DatabaseSide):
    """Server-wide ``SHOW GLOBAL STATUS`` deltas minus this process's own statements."""

    def __init__(self) -> None:
        self.available = True
        self.note = "SHOW GLOBAL STATUS deltas (server-wide) minus this process's statements"

    def mark(self) -> Any:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS")
            values = dict(cursor.fetchall())
        return {key: int(values.get(key, 0)) for key in MARIADB_STATUS}

    def since(self, mark: Any, own: dict[str, int]) -> dict[str, Any] | None:
        now = self.mark()
        delta = {key: now[key] - mark[key] for key in MARIADB_STATUS}
        # This process's main thread: its polls and scheduling, and the SHOW GLOBAL STATUS
        # that read ``now``.
        kinds = counting.by_kind(own, BENCH_GROUP)
        delta["Questions"] -= counting.round_trips(kinds, "mysql")["total"] + 1
        for kind, status in OWN_TO_STATUS.items():
            delta[status] -= kinds[kind]
        return {
            "statements": delta["Questions"],
            "connections": delta["Connections"],
            "kinds": {k.removeprefix("Com_"): v for k, v in delta.items() if k.startswith("Com_")},
        }


def database_side(db: str, pg_log: Path | None) -> DatabaseSide:
    if db == "postgres":
        return PostgresLog(pg_log)
    if db == "mariadb":
        return MariaDBStatus()
    return DatabaseSide()
