"""How long a connection to everystep's database may stay silent before it counts as gone.

A database that vanishes cleanly (a restart, a killed server) closes its sockets, and the
next statement fails at once. A dirty network fault does not: a NAT or load balancer that
lost its state, or a primary gone in a failover, leaves the connection open with nothing
answering. Without a bound a statement then waits as long as the kernel keeps
retransmitting (about 15 minutes) and an idle connection forever: a worker that never
takes work again, and never gets to its SIGTERM.

``configure(timeout)`` bounds that for every connection of everystep's aliases (its
database and the LISTEN alias), in whatever process Django runs (a worker, a web process
awaiting a run), with what the operating system offers below any query:

- TCP keepalives, so a connection that waits for an answer, or for a NOTIFY, sends probes
  and is dropped when ``timeout`` seconds pass without one acknowledged;
- ``TCP_USER_TIMEOUT``, so data sent and never acknowledged fails the connection after
  ``timeout`` seconds instead of after the kernel's retransmissions;
- a connect timeout, so a new connection into a blackhole gives up after ``timeout``.

None of these limits a slow query: the server's kernel acknowledges the probes while a
statement runs for an hour. A read timeout would cut one short, which is why none is set.
PostgreSQL takes them as libpq parameters (``keepalives_idle``, ``tcp_user_timeout``,
``connect_timeout``…), so they reach every connection built from the alias's parameters,
the LISTEN connections included; mysqlclient has no such parameters beyond
``connect_timeout``, so the socket of each new connection is set once it is open.

The project's own configuration wins: a key it set in ``OPTIONS`` is left as it is, and
so is what libpq or the MySQL client would take from elsewhere (``PGCONNECT_TIMEOUT``; a
service, named in ``OPTIONS`` or by ``PGSERVICE``: then no libpq parameter at all; an
option file named by ``read_default_file``/``read_default_group``: then no
``connect_timeout``). The OPTIONS dict is never written into: the alias gets a new one,
since another alias, or the project's own constant, may hold the same dict.
``timeout = 0`` changes nothing (the way to keep a MariaDB socket as the project set it).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

from everystep import conf

# The timeout in force for this process's new connections (0: not set by everystep).
_timeout = 0.0
# The OPTIONS keys everystep set, by alias: a later ``configure`` (a worker's own option
# over the setting) may change them, never a key the project set.
_set_here: dict[str, set[str]] = {}


def configure(timeout: float) -> None:
    """Bound silent connections of everystep's aliases to about ``timeout`` seconds, from
    the next connection each thread opens."""
    global _timeout
    _timeout = timeout
    for alias in _aliases():
        _configure_alias(alias, timeout)
    connection_created.connect(_set_socket, dispatch_uid="everystep.network")


def _configure_alias(alias: str, timeout: float) -> None:
    ours = _set_here.setdefault(alias, set())
    # The OPTIONS as the project wrote them: what an earlier ``configure`` added is not
    # the project's, and may be changed now.
    options = connections.settings[alias].get("OPTIONS") or {}
    theirs = {key: value for key, value in options.items() if key not in ours}
    wanted: dict[str, int] = {}
    if timeout > 0:
        wanted = _wanted(connections[alias].vendor, theirs, timeout)
    wanted = {key: value for key, value in wanted.items() if key not in theirs}
    if not ours and not wanted:
        return  # nothing to add or take back: the project's settings stay untouched
    # Copy on write: the OPTIONS dict may be another alias's too (``{**base, "PORT": …}``
    # copies only the outer dict), or a constant of the project's. The alias's settings
    # dict itself, which every thread's wrapper reads at connect time, gets a new one.
    _own_settings(alias)["OPTIONS"] = {**theirs, **wanted}
    ours.clear()
    ours.update(wanted)


def _wanted(vendor: str, theirs: dict[str, Any], timeout: float) -> dict[str, int]:
    """The OPTIONS keys everystep would add, short of those the project's configuration
    outside OPTIONS decides: there the project's word wins, as it does in OPTIONS."""
    if vendor == "postgresql":
        # A service (pg_service.conf) may set any of these; a parameter given to libpq
        # outright would override it, so with a service everystep sets none.
        if theirs.get("service") or "PGSERVICE" in os.environ:
            return {}
        wanted = libpq_parameters(timeout)
        # The only one of them libpq also reads from the environment (as it does, any
        # value counts as set).
        if "PGCONNECT_TIMEOUT" in os.environ:
            del wanted["connect_timeout"]
        return wanted
    if vendor == "mysql":
        # An option file the project names may set connect-timeout; the socket's
        # keepalives (``_set_socket``) are nothing an option file can set, and stay.
        if theirs.get("read_default_file") or theirs.get("read_default_group"):
            return {}
        return {"connect_timeout": _whole_seconds(timeout)}
    return {}


def _own_settings(alias: str) -> dict[str, Any]:
    """The settings dict of ``alias``, first made its own if another alias shares it
    (``DATABASES = {"default": base, "jobs": base}``)."""
    settings: dict[str, Any] = connections.settings[alias]
    if not any(other is settings for name, other in connections.settings.items() if name != alias):
        return settings
    settings = connections.settings[alias] = dict(settings)
    # This thread's wrapper, if made already, reads its dict, not the handler's; the
    # first ``configure`` runs in ``ready()``, before any other thread has one.
    for conn in connections.all(initialized_only=True):
        if conn.alias == alias:
            conn.settings_dict = settings
    return settings


def libpq_parameters(timeout: float) -> dict[str, int]:
    """The libpq connection parameters that bound a silent connection to ``timeout``."""
    idle, interval = _keepalive_times(timeout)
    return {
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": 3,
        "tcp_user_timeout": int(timeout * 1000),
        "connect_timeout": _whole_seconds(timeout),
    }


def _keepalive_times(timeout: float) -> tuple[int, int]:
    # The first probe after a third of the timeout of silence, then three more probes
    # before it ends: a dead peer is given up on within the timeout, while TCP_USER_TIMEOUT
    # (which Linux also applies to unanswered probes) keeps a live one from being dropped
    # before the whole timeout has passed.
    idle = max(1, int(timeout / 3))
    return idle, max(1, int(timeout / 6))


def _whole_seconds(timeout: float) -> int:
    return max(2, math.ceil(timeout))  # libpq takes whole seconds, at least 2


def _aliases() -> set[str]:
    listen = conf.listen_database()
    return {conf.database(), *([listen] if listen else [])}


def _set_socket(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A new MariaDB/MySQL connection of everystep's: keepalives and ``TCP_USER_TIMEOUT``
    on its socket (PostgreSQL's come from libpq's parameters)."""
    if _timeout <= 0 or connection.vendor != "mysql" or connection.alias not in _aliases():
        return
    set_socket_timeouts(connection.connection.fileno(), _timeout)


def set_socket_timeouts(fileno: int, timeout: float) -> None:
    """Keepalives and ``TCP_USER_TIMEOUT`` on the TCP socket ``fileno`` (a Unix socket is
    left alone: it has no network to lose)."""
    # A duplicate of the descriptor: options belong to the socket, not to the descriptor,
    # and closing the duplicate leaves the driver's own open.
    with contextlib.closing(socket.socket(fileno=os.dup(fileno))) as sock:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        idle, interval = _keepalive_times(timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (
            ("TCP_KEEPIDLE", idle),
            ("TCP_KEEPINTVL", interval),
            ("TCP_KEEPCNT", 3),
            ("TCP_USER_TIMEOUT", int(timeout * 1000)),
        ):
            if hasattr(socket, name):  # Linux has all four; macOS lacks some
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
