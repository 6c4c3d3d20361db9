"""How the engine's store calls report a database that failed them: ``guarded`` turns a
lost or unreachable database into ``StoreUnavailable`` (the pass stops without deciding
anything; the worker runs it again later), and a value too large for the server into a
plain ``EverystepError`` (the same write would fail every time)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError

from everystep.errors import EverystepError, StoreUnavailable
from everystep.store import database

P = ParamSpec("P")
R = TypeVar("R")


def guarded(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a lost or unreachable database into ``StoreUnavailable`` for the engine."""

    @functools.wraps(func)
    def guard(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (DatabaseError, InterfaceError) as exc:
            if is_read_only(exc):
                # Not the primary (any more): a failover is under way, or this address
                # now reaches a standby. The connection answers, so nothing would replace
                # it; it is retired, and the next attempt connects afresh.
                database.retire()
            elif not isinstance(exc, OperationalError | InterfaceError):
                raise
            refused = too_large(exc)
            if refused is not None:
                raise refused from exc
            raise StoreUnavailable(f"database unavailable in {func.__name__}: {exc}") from exc

    return guard


# MySQL/MariaDB error 1153: a statement bigger than the server's max_allowed_packet (16 MiB
# by default on MariaDB). No outage: the same write fails each time, so retrying it would
# run the step again forever.
_PACKET_TOO_LARGE = 1153


def too_large(exc: Exception) -> EverystepError | None:
    """The ``EverystepError`` for a write refused for its size, else None."""
    if database.connection().vendor != "mysql" or not exc.args or exc.args[0] != _PACKET_TOO_LARGE:
        return None
    if not database.connection().in_atomic_block:
        # The server drops the connection after this error: the next statement (the
        # run's failure) must open a new one.
        database.connection().close()
    return EverystepError(
        f"the database refused a value this large ({exc.args[-1]}): raise the server's "
        "max_allowed_packet, or keep large data out of arguments and results"
    )


# MariaDB/MySQL's refusals of a write on a read-only server: 1290 (``--read-only``, among
# other options: the message tells), 1792 (a read-only transaction), 1836 (read-only mode).
_READ_ONLY_ERRORS = (1290, 1792, 1836)


def is_read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing a write because it is read-only: a standby
    (PostgreSQL SQLSTATE 25006) or a MariaDB/MySQL server in read-only mode."""
    if getattr(exc.__cause__, "sqlstate", None) == "25006":
        return True
    args: tuple[object, ...] = exc.args
    return (
        len(args) >= 2
        and args[0] in _READ_ONLY_ERRORS
        and (args[0] != 1290 or "read-only" in str(args[1]).lower())
    )


# What a database outage raises through Django: ``InterfaceError`` (a connection closed
# under the driver) is not a ``DatabaseError``, and must not end a worker's loop either.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)
# The same, as the engine's store calls report it.
UNREACHABLE: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, StoreUnavailable)
