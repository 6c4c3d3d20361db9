"""Database URLs → a Django ``DATABASES["default"]`` dict, and masking them for display.

Pure functions with no Django import: the runner validates ``database_url`` while loading
its settings, before Django is set up. Errors are ``ValueError`` whose message is what was
expected; ``everystep_runner.settings`` adds the setting name and its source.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

POSTGRES = "django.db.backends.postgresql"
MYSQL = "django.db.backends.mysql"
SQLITE = "django.db.backends.sqlite3"

ENGINES = {
    "postgres": POSTGRES,
    "postgresql": POSTGRES,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "sqlite": SQLITE,
}

# What everystep needs from each backend unless the URL's query string says otherwise.
# SQLite: wait for the write lock instead of failing, take it at BEGIN (a deferred
# transaction that later writes can deadlock with another writer), and let readers run
# beside the writer. MySQL/MariaDB: store any JSON text, emoji included.
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    SQLITE: {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    },
    MYSQL: {"charset": "utf8mb4"},
    POSTGRES: {},
}

MASK = "***"


def parse(url: str) -> dict[str, Any]:
    """Return the Django database dict for ``url``; raise ``ValueError`` if it is not one."""
    scheme, sep, _ = url.partition("://")
    engine = ENGINES.get(scheme.lower()) if sep else None
    if engine is None:
        raise ValueError(f"a URL whose scheme is one of {', '.join(ENGINES)}")
    parts = urlsplit(url)
    if engine == SQLITE:
        database = _sqlite(parts.netloc, parts.path)
    else:
        database = _server(engine, parts.netloc, parts.path)
    options = {**DEFAULT_OPTIONS[engine], **_options(parts.query)}
    if options:
        database["OPTIONS"] = options
    return database


def mask_password(url: str) -> str:
    """``url`` with the password replaced by ``***``, for logs and the config check.

    Deliberately cruder than a URL parser: it masks everything between the user name and
    the last ``@``, so a password holding an unescaped ``/``, ``?`` or ``#`` (which a
    parser would split into the path) is still hidden. Over-masking only affects display.
    """
    scheme, sep, rest = url.partition("://")
    at = rest.rfind("@")
    if not sep or at == -1:
        return url
    user, colon, _ = rest[:at].partition(":")
    return f"{scheme}://{user}:{MASK}@{rest[at + 1 :]}" if colon else url


def _sqlite(netloc: str, path: str) -> dict[str, Any]:
    # sqlite:////abs/path → "/abs/path"; sqlite:///rel/path → "rel/path" (relative to the
    # working directory). A host part is a typo for one of those, never a real host.
    if netloc:
        raise ValueError("sqlite:////absolute/path or sqlite:///relative/path (no host)")
    name = unquote(path[1:])
    if not name:
        raise ValueError("a database file path after sqlite:///")
    return {"ENGINE": SQLITE, "NAME": name}


def _server(engine: str, netloc: str, path: str) -> dict[str, Any]:
    user, password, host, port = _split_netloc(netloc)
    name = unquote(path[1:])
    if not name or "/" in name:
        raise ValueError("a database name as the URL path, like postgres://host:5432/dbname")
    return {
        "ENGINE": engine,
        "NAME": name,
        "USER": user,
        "PASSWORD": password,
        "HOST": host,
        "PORT": port,
    }


def _split_netloc(netloc: str) -> tuple[str, str, str, str]:
    """``user:password@host:port`` → its four parts, percent-decoded, ``""`` when absent.

    Done by hand rather than with ``SplitResult.hostname``, which lower-cases the host and
    would corrupt a percent-encoded Unix socket directory such as ``%2Fvar%2Frun%2FPG``.
    """
    userinfo, _, hostport = netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if hostport.startswith("["):  # IPv6 literal: [::1]:5432
        host, _, after = hostport[1:].partition("]")
        port = after.removeprefix(":")
    else:
        host, _, port = hostport.partition(":")
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError("a port between 1 and 65535 after the host")
    return unquote(user), unquote(password), unquote(host), port


def _options(query: str) -> dict[str, Any]:
    # Digit-only values become ints: sqlite3's timeout and mysqlclient's connect_timeout
    # reject strings, and no option of these backends needs a digit-only string.
    return {
        key: int(value) if value.isdigit() else value
        for key, value in parse_qsl(query, keep_blank_values=True)
    }
