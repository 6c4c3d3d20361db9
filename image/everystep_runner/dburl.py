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
    """``url`` for display: the password and every secret-bearing query value replaced by
    ``***``, for logs and the config check. Only for a URL that ``parse`` accepts: an
    unparseable value is never shown at all (see ``everystep_runner.settings``).

    Deliberately cruder than a URL parser: it masks everything between the user name and
    the last ``@``, so a password holding an unescaped ``/``, ``?`` or ``#`` (which a
    parser would split into the path) is still hidden. Over-masking only affects display.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    at = rest.rfind("@")
    user, colon, _ = rest[:at].partition(":") if at != -1 else ("", "", "")
    if colon:
        masked = f"{user}:{MASK}@"
        return f"{scheme}://{masked}{_mask_query(rest[at + 1 :])}"
    return f"{scheme}://{_mask_query(rest)}"


# Query keys whose value is a secret, or a path to one: the drivers take ``password``,
# ``sslpassword``, ``passfile``, ``sslkey`` and more as connection options (``_options``
# passes every key on), and a key naming a secret, token or key is masked whatever its
# backend calls it.
SECRET_WORDS = ("pass", "secret", "token", "key")


def is_secret_key(key: str) -> bool:
    """True for a query key whose value must not be displayed."""
    key = unquote(key).lower()
    return any(word in key for word in SECRET_WORDS)


def _mask_query(rest: str) -> str:
    # Everything after the first "?" is the query, and after the first "#" the fragment:
    # an "@" or "?" inside a value must not move either start. ``parse`` never uses a
    # fragment, so it is hidden whole rather than judged.
    rest, hash_mark, _ = rest.partition("#")
    head, question_mark, query = rest.partition("?")
    pairs = "&".join(_mask_pair(pair) for pair in query.split("&")) if question_mark else ""
    return f"{head}{question_mark}{pairs}{hash_mark and '#' + MASK}"


def _mask_pair(pair: str) -> str:
    key, equals, _ = pair.partition("=")
    return f"{key}={MASK}" if equals and is_secret_key(key) else pair


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
