"""The library's Django settings, read in one place with their defaults.

Invalid values are reported by the system checks in ``everystep.checks``.
"""

from __future__ import annotations

from django.conf import settings

DEFAULTS: dict[str, object] = {
    # Threads all parallel() forks of this process may use at once, beyond the
    # forking threads themselves; branches without a free slot run inline.
    "EVERYSTEP_FORK_THREADS": 8,
    # PostgreSQL only: NOTIFY on schedule/requeue and LISTEN in idle workers, so a run
    # starts in milliseconds instead of up to one poll. Polling stays the correctness path.
    "EVERYSTEP_NOTIFY": True,
    # Seconds between runner heartbeats, and the heartbeat age after which another
    # worker requeues a runner's runs (0 turns orphan recovery off).
    "EVERYSTEP_HEARTBEAT": 5.0,
    "EVERYSTEP_ORPHAN_TIMEOUT": 60.0,
    # The UI without login: only for a UI behind its own authentication (or the demo).
    "EVERYSTEP_UI_PUBLIC": False,
}


def get(name: str) -> object:
    return getattr(settings, name, DEFAULTS[name])


def fork_threads() -> int:
    value = get("EVERYSTEP_FORK_THREADS")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 8


def ui_public() -> bool:
    """Exactly ``True`` opens the UI: a stray string such as "False" must not."""
    return get("EVERYSTEP_UI_PUBLIC") is True


def notify() -> bool:
    return bool(get("EVERYSTEP_NOTIFY"))


def seconds(name: str) -> float:
    value = get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    default = DEFAULTS[name]
    assert isinstance(default, float)
    return default
