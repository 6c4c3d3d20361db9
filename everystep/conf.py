"""The library's Django settings, read in one place with their defaults.

Invalid values are reported by the system checks in ``everystep.checks``.
"""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    # Threads all parallel() forks of this process may use at once, beyond the
    # forking threads themselves; branches without a free slot run inline.
    "EVERYSTEP_FORK_THREADS": 8,
}


def get(name: str) -> object:
    return getattr(settings, name, DEFAULTS[name])


def fork_threads() -> int:
    value = get("EVERYSTEP_FORK_THREADS")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 8
