"""A SQLite database in a mounted volume: say in one line what to change when this
process cannot write it, and create it so that the next user can.

SQLite writes beside its database file (``-wal``, ``-shm``, ``-journal``), so it needs
the directory writable, not only the file. The image runs as UID 10001 in group 0, and
platforms that pick an arbitrary UID keep group 0: a file this process creates is made
group-writable (umask 002, and the database created 0664 before SQLite opens it — SQLite
would create it 0644 — whose journal files then copy its mode), so a worker under
another UID in group 0 can write it too.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

# While the worker role waits for a database it cannot write, how often it looks again,
# and how often it says so again.
RECHECK = 2.0
REPEAT = 60.0


def paths() -> list[Path]:
    """The database files of the project's SQLite aliases (Django set up)."""
    from django.conf import settings

    found: list[Path] = []
    for alias in settings.DATABASES.values():
        name = str(alias.get("NAME") or "")
        if alias.get("ENGINE", "").endswith("sqlite3") and name and not _in_memory(name):
            path = Path(name).resolve()
            if path not in found:
                found.append(path)
    return found


def _in_memory(name: str) -> bool:
    return name == ":memory:" or name.startswith("file:") or "mode=memory" in name


def problem(path: Path, *, absent_is_outage: bool = False) -> str | None:
    """What keeps this process from writing the SQLite database ``path``, in one line
    saying what to change; None if nothing does. ``absent_is_outage``: a directory that
    does not exist is not reported (for a worker, whose own retries say "database
    unavailable" until it is back, as for a server that is down)."""
    who = f"UID {os.getuid()} (group {os.getgid()})"
    folder = path.parent
    if not folder.is_dir():
        if absent_is_outage:
            return None
        return (
            f"SQLite database {path}: the directory {folder} does not exist; mount a volume "
            "there or point the database URL at a directory that exists"
        )
    for existing in [path, *(Path(f"{path}{end}") for end in ("-wal", "-shm", "-journal"))]:
        if existing.exists() and not os.access(existing, os.R_OK | os.W_OK):
            return (
                f"SQLite database {path}: {existing.name} ({_owner(existing)}) is not "
                f"writable by {who}; chown it to this user, or chmod g+rw it with group 0"
            )
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"SQLite database {path}: the directory {folder} ({_owner(folder)}) is not "
            f"writable by {who}, and SQLite writes its journal files beside the database; "
            f"make it writable by this user or by group 0 (chown 10001:0 or chmod g+rwx "
            "on the volume's directory)"
        )
    return None


def _owner(path: Path) -> str:
    info = path.stat()
    return f"owner {info.st_uid}:{info.st_gid}, mode {stat.filemode(info.st_mode)}"


def create(path: Path) -> None:
    """Create ``path`` empty and group-writable if it does not exist (an empty file is a
    valid SQLite database)."""
    # Gone meanwhile, or not ours to create: SQLite says so when it opens it.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o664))


def ready(*, wait: bool, say: Callable[[str], None] | None = None) -> str | None:
    """Check every SQLite database of the project; create the missing ones writable.
    Without ``wait``: the first problem's line, or None. With ``wait`` (the worker role):
    say the problem (again every ``REPEAT`` seconds) and look again every ``RECHECK``
    seconds until there is none; a worker then starts without a restart."""
    say = say or (lambda line: print(f"everystep-runner: {line}", file=sys.stderr, flush=True))
    said_at: float | None = None
    databases = paths()  # the settings do not change while this waits
    while True:
        found = next(
            (line for path in databases if (line := problem(path, absent_is_outage=wait))), None
        )
        if found is None:
            for path in databases:
                create(path)
            if said_at is not None:
                say("the SQLite database is writable now: starting")
            return None
        if not wait:
            return found
        if said_at is None or time.monotonic() - said_at >= REPEAT:
            say(f"{found}; waiting until it is")
            said_at = time.monotonic()
        time.sleep(RECHECK)
