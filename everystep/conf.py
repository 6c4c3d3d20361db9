"""The library's Django settings, read in one place.

The worker's settings (``EVERYSTEP_NOTIFY``, ``EVERYSTEP_HEARTBEAT``,
``EVERYSTEP_ORPHAN_TIMEOUT``) are declared with the other worker options in
``everystep.options``; the rest are here. Invalid values are reported by the system checks
in ``everystep.checks``.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS

from everystep import options

DEFAULTS: dict[str, object] = {
    # Threads all parallel() forks of this process may use at once, beyond the
    # forking threads themselves; branches without a free slot run inline.
    "EVERYSTEP_FORK_THREADS": 8,
    # The UI without login: only for a UI behind its own authentication (or the demo).
    "EVERYSTEP_UI_PUBLIC": False,
    # Times a run may be taken back from a dead worker before it is failed; 0 = no limit.
    "EVERYSTEP_MAX_RECOVERIES": 10,
    # Who ``metrics_view`` answers: "permission" (a logged-in user holding
    # everystep.view_workflow), "public" (anyone: only behind a network that limits who
    # reaches it), or "off" (404).
    "EVERYSTEP_METRICS_VIEW": "permission",
    # Modules besides every installed app's ``workflows`` that every process imports as
    # Django starts, so a worker knows the workflows defined in them.
    "EVERYSTEP_WORKFLOW_MODULES": (),
}

METRICS_VIEW_MODES = ("permission", "public", "off")
# Every Django setting everystep reads: the above, the aliases, and the worker options
# that have one. (The runner warns of an EVERYSTEP_* variable that is none of these and
# none of its own settings: a misspelling.)
SETTING_NAMES: frozenset[str] = frozenset(
    {
        *DEFAULTS,
        "EVERYSTEP_DATABASE",
        "EVERYSTEP_LISTEN_DATABASE",
        "EVERYSTEP_PREPARED_STATEMENTS",
        "EVERYSTEP_CODE_VERSION",
        *(option.setting for option in options.OPTIONS if option.setting),
    }
)


def get(name: str) -> object:
    return getattr(settings, name, DEFAULTS[name])


def configured(name: str) -> Any:
    """The project's value of Django setting ``name``, or ``options.NOT_SET``."""
    return getattr(settings, name, options.NOT_SET)


def worker_options(**given: Any) -> dict[str, Any]:
    """Every worker option resolved from ``given``, the Django settings and the defaults
    (see ``everystep.options``); ``OptionError`` if any is invalid."""
    return options.resolve(given, configured)


# The integer settings: the least valid value, and how the system check words the rule.
COUNTS: dict[str, tuple[int, str, str]] = {
    "EVERYSTEP_FORK_THREADS": (1, "a positive integer", "everystep.E001"),
    "EVERYSTEP_MAX_RECOVERIES": (0, "an integer >= 0 (0 = no limit)", "everystep.E004"),
}


def count_setting(name: str) -> tuple[int, bool]:
    """Integer setting ``name`` and whether it is valid; an invalid one gives the default
    (the system checks report it)."""
    value = get(name)
    valid = isinstance(value, int) and not isinstance(value, bool) and value >= COUNTS[name][0]
    default = DEFAULTS[name]
    assert isinstance(default, int)
    return (value if valid else default), valid  # type: ignore[return-value]


def fork_threads() -> int:
    return count_setting("EVERYSTEP_FORK_THREADS")[0]


def max_recoveries() -> int:
    """``EVERYSTEP_MAX_RECOVERIES``; 0 means no limit."""
    return count_setting("EVERYSTEP_MAX_RECOVERIES")[0]


def ui_public() -> bool:
    """Exactly ``True`` opens the UI: a stray string such as "False" must not."""
    return get("EVERYSTEP_UI_PUBLIC") is True


def metrics_view_mode() -> str:
    """``EVERYSTEP_METRICS_VIEW``; anything but "public" or "off" keeps the permission
    rule (the system checks report a wrong value)."""
    mode = get("EVERYSTEP_METRICS_VIEW")
    return mode if mode in ("public", "off") else "permission"


def workflow_modules() -> tuple[list[str], bool]:
    """``EVERYSTEP_WORKFLOW_MODULES`` and whether it is valid: a list or tuple of dotted
    module names. An invalid value gives none (the system checks report it)."""
    value = get("EVERYSTEP_WORKFLOW_MODULES")
    if isinstance(value, list | tuple) and all(
        isinstance(module, str) and module.strip() for module in value
    ):
        return [str(module) for module in value], True
    return [], False


def in_test_environment() -> bool:
    """Whether Django's test environment is set up (``setup_test_environment()``, which
    Django's test runner and pytest-django call, has run and not been torn down).

    Django's own marker, ``_TestState.saved_data``, is exact: it exists from setup to
    teardown, and Django reads it to refuse a second setup. ``mail.outbox`` is no proof on
    its own: the locmem email backend creates it in any process that sends mail. It is the
    fallback only for a Django without ``_TestState``."""
    test_utils = sys.modules.get("django.test.utils")
    if test_utils is None:  # imported by setup_test_environment()'s caller: not set up
        return False
    state = getattr(test_utils, "_TestState", None)
    if state is not None:
        return hasattr(state, "saved_data")
    return hasattr(sys.modules.get("django.core.mail"), "outbox")


def worker_default(name: str) -> Any:
    """What a worker given no value for option ``name`` uses: its Django setting, or the
    default when that is unset or invalid (the system checks report it)."""
    option = options.BY_NAME[name]
    value = options.NOT_SET if option.setting is None else configured(option.setting)
    try:
        return option.default if value is options.NOT_SET else option.check(value)
    except ValueError:
        return option.default


def notify() -> bool:
    """Whether scheduling and requeueing send a PostgreSQL NOTIFY."""
    return bool(worker_default("notify"))


@cache
def database() -> str:
    """``EVERYSTEP_DATABASE``: the ``DATABASES`` alias holding everystep's tables. Every
    everystep statement names it, so a project's router never sends one elsewhere (a
    read to a lagging replica, say). A value that is not an alias gives ``default`` (the
    system checks report it). Cached: the hot path asks once per statement."""
    alias = getattr(settings, "EVERYSTEP_DATABASE", DEFAULT_DB_ALIAS)
    return alias if alias in settings.DATABASES else DEFAULT_DB_ALIAS


@cache
def listen_database() -> str | None:
    """``EVERYSTEP_LISTEN_DATABASE``: an alias that reaches PostgreSQL directly, used only
    to LISTEN (a transaction-mode pooler cannot hold one). Unset: LISTEN goes over
    everystep's own alias. A value that is not an alias gives None (checks report it)."""
    alias = getattr(settings, "EVERYSTEP_LISTEN_DATABASE", None)
    if alias is None:
        return database()
    return alias if alias in settings.DATABASES else None


@cache
def prepared_statements() -> bool | None:
    """``EVERYSTEP_PREPARED_STATEMENTS``: ``True``/``False``, or None (unset, or invalid:
    the system checks report it) to prepare only where the connection is shown to keep a
    session of its own (``everystep.store.prepared``). Cached: asked once per statement,
    and an unset setting costs an exception on every lookup."""
    value = getattr(settings, "EVERYSTEP_PREPARED_STATEMENTS", None)
    return value if value is True or value is False else None


def _forget(*, setting: str, **_: Any) -> None:
    if setting in {"EVERYSTEP_DATABASE", "EVERYSTEP_LISTEN_DATABASE", "DATABASES"}:
        database.cache_clear()
        listen_database.cache_clear()
    if setting == "EVERYSTEP_PREPARED_STATEMENTS":
        prepared_statements.cache_clear()
    if setting == "EVERYSTEP_CODE_VERSION":
        from everystep import code_version

        code_version.forget()


setting_changed.connect(_forget)
