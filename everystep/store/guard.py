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
        except (OperationalError, InterfaceError) as exc:
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


# What a database outage raises through Django: ``InterfaceError`` (a connection closed
# under the driver) is not a ``DatabaseError``, and must not end a worker's loop either.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)
# The same, as the engine's store calls report it.
UNREACHABLE: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, StoreUnavailable)
