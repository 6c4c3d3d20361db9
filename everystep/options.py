"""The worker's options, each declared once.

Every edge derives from ``OPTIONS`` or is tested against it: ``Worker`` resolves and
validates its arguments with ``resolve``, once, into a ``WorkerOptions``
(``everystep.worker.worker_state``) with one field per option; ``manage.py everystep_worker``
builds its flags from it; the system checks validate the Django settings with it; the
runner image takes each setting's type, limits and help from it; a test holds the table
in docs/reference/worker-options.md to ``readme_table()``.

Where a value comes from, highest precedence first:

1. an explicit ``Worker(...)`` argument — which is what a ``manage.py everystep_worker``
   flag becomes, and what the runner image passes for a setting it was *given* (its own
   flag > environment variable > TOML file; a runner setting left unset passes nothing);
2. the project's Django setting, for the options that have one (``EVERYSTEP_HEARTBEAT``…);
3. the default below.

This module imports nothing of Django or of everystep, so the runner can read it before
Django is configured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

NOT_SET = object()
AUTO = "auto"


class OptionError(ValueError):
    """Worker options with values outside their limits; ``problems`` has one line per
    problem, each naming the option (or the Django setting it was read from)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Option:
    """One worker option: its ``Worker`` keyword, the stem of its flag and runner key, its
    type, default, limits and help, and the Django setting that may supply it."""

    name: str  # the Worker keyword: pool_size
    key: str  # flag, runner TOML key and environment variable stem: --pool, pool, EVERYSTEP_POOL
    kind: type  # int, float, str or bool
    default: Any
    help: str
    minimum: float | None = None
    above: bool = False  # the minimum itself is refused
    maximum: float | None = None
    setting: str | None = None  # the Django setting read when no value is given
    default_text: str | None = None  # how a default computed at run time is shown
    # A sanity cap beyond which no value makes sense (threads, timer waits), refused
    # with its own message so that ``expected()`` keeps naming the usual limits.
    ceiling: float | None = None
    # The word ``auto`` is accepted too, and kept as it is: what it stands for is decided
    # where the option is used (``processes``: the CPUs this process may use).
    auto: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    def expected(self) -> str:
        """What the option accepts, in the words of error messages and help texts."""
        if self.auto:
            return f"{replace(self, auto=False).expected()}, or auto"
        if self.kind is bool:
            return "True or False"
        if self.kind is str:
            return f"a non-empty string of at most {self.maximum:g} characters"
        noun = "an integer" if self.kind is int else "a number"
        if self.minimum is not None and self.maximum is not None:
            return f"{noun} from {self.minimum:g} to {self.maximum:g}"
        if self.minimum is not None:
            return f"{noun} {'>' if self.above else '>='} {self.minimum:g}"
        return noun

    def check(self, value: Any) -> Any:
        """``value`` normalised (an int given for a float option becomes a float), or a
        ``ValueError`` saying what is expected."""
        if self.auto and isinstance(value, str) and value.strip().lower() == "auto":
            return AUTO
        if not self._well_typed(value) or not self._within_limits(value):
            raise ValueError(f"must be {self.expected()}, got {value!r}")
        if self.ceiling is not None and value > self.ceiling:
            raise ValueError(f"must be at most {self.ceiling:g}, got {value!r}")
        if self.kind is str and not _storable(value):
            raise ValueError(f"must not contain a NUL character or a lone surrogate, got {value!r}")
        return float(value) if self.kind is float else value

    def parse(self, text: str) -> Any:
        """A command-line value of the option as its type (``auto`` as it is)."""
        if self.auto and text.strip().lower() == "auto":
            return AUTO
        return self.kind(text)

    def _well_typed(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is str:
            return isinstance(value, str) and bool(value.strip())
        if isinstance(value, bool):  # True is an int to Python, never a pool size to us
            return False
        if self.kind is int:
            return isinstance(value, int)
        return isinstance(value, int | float) and math.isfinite(value)

    def _within_limits(self, value: Any) -> bool:
        size = len(value) if self.kind is str else value
        if self.kind is bool:
            return True
        if self.minimum is not None and (
            size <= self.minimum if self.above else size < self.minimum
        ):
            return False
        return self.maximum is None or size <= self.maximum


def _storable(text: str) -> bool:
    """Text every database stores (no NUL, valid UTF-8): a runner name is written to the
    run rows and matched as it is."""
    return "\x00" not in text and not any("\ud800" <= ch <= "\udfff" for ch in text)


# A week: beyond it a poll, heartbeat or timeout is a typo, and timer waits overflow.
_LONGEST = 7 * 24 * 3600.0

OPTIONS: tuple[Option, ...] = (
    Option(
        "pool_size",
        "pool",
        int,
        4,
        "runs in flight at most; nothing is claimed while the pool is full",
        minimum=1,
        ceiling=10_000,  # one thread each
    ),
    Option(
        "processes",
        "processes",
        int,
        1,
        "worker processes under one supervisor, each with its own pool and connections; "
        "auto = the CPUs this process may use (its cgroup quota, not the host's cores)",
        minimum=1,
        ceiling=1024,
        auto=True,
    ),
    Option(
        "poll",
        "poll",
        float,
        0.2,
        "seconds between claim polls when idle",
        minimum=0,
        above=True,
        ceiling=_LONGEST,
    ),
    Option(
        "name",
        "name",
        str,
        None,
        "runner name recorded on every claimed run (claimed_by): "
        "unique among live workers, stable across restarts",
        minimum=1,
        maximum=255,
        default_text="the hostname",
    ),
    Option(
        "drain",
        "drain",
        float,
        30.0,
        "seconds to wait for in-flight steps at shutdown; 0 waits indefinitely",
        minimum=0,
        ceiling=_LONGEST,
    ),
    Option(
        "metrics_port",
        "metrics_port",
        int,
        0,
        "port for /metrics, /healthz (/livez) and /readyz; 0 = off",
        minimum=0,
        maximum=65535,
    ),
    Option(
        "metrics_bind",
        "metrics_bind",
        str,
        # Loopback: the probes and metrics say how busy the workers are and which runs
        # they hold; a container that wants them reachable says so (the image does).
        "127.0.0.1",
        "address the metrics port binds",
        minimum=1,
        maximum=255,
    ),
    Option(
        "notify",
        "notify",
        bool,
        True,
        "PostgreSQL: LISTEN for new runs instead of waiting "
        "for the next poll (polling stays the correctness path)",
        setting="EVERYSTEP_NOTIFY",
    ),
    Option(
        "heartbeat",
        "heartbeat",
        float,
        5.0,
        "seconds between heartbeats of this runner",
        minimum=0,
        above=True,
        ceiling=_LONGEST,
        setting="EVERYSTEP_HEARTBEAT",
    ),
    Option(
        "orphan_timeout",
        "orphan_timeout",
        float,
        60.0,
        "requeue the runs of runners whose "
        "heartbeat is older than this; 0 = never (must exceed twice the heartbeat)",
        minimum=0,
        ceiling=_LONGEST,
        setting="EVERYSTEP_ORPHAN_TIMEOUT",
    ),
    Option(
        "liveness_timeout",
        "liveness_timeout",
        float,
        None,
        "/healthz fails when the claim loop has not ticked for this many seconds",
        minimum=0,
        above=True,
        ceiling=_LONGEST,
        default_text="max(60, 10 * poll)",
    ),
    Option(
        "network_timeout",
        "network_timeout",
        float,
        30.0,
        "seconds a silent database connection (a blackhole, a failover) is given before "
        "it counts as lost; 0 = leave the connections as the project set them",
        minimum=0,
        ceiling=_LONGEST,
        setting="EVERYSTEP_NETWORK_TIMEOUT",
    ),
    Option(
        "reload",
        "reload",
        bool,
        False,
        "restart the worker when the project's code changes, draining first, as "
        "runserver does: for development",
    ),
)
BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


def reload_rule(values: Mapping[str, Any]) -> str | None:
    """``--reload`` restarts one process on a change: a group of them is not reloaded."""
    if values["reload"] and values["processes"] != 1:
        return f"must be 1 with reload (a development worker), got {values['processes']}"
    return None


def orphan_rule(values: Mapping[str, Any]) -> str | None:
    """Orphan recovery must not take a live runner for dead: a timeout, when on, exceeds
    two heartbeat intervals (one may be late without the runner being gone)."""
    orphan, heartbeat = values["orphan_timeout"], values["heartbeat"]
    if 0 < orphan <= 2 * heartbeat:
        return f"must be more than twice heartbeat ({heartbeat:g}), or 0, got {orphan:g}"
    return None


# Rules over several options: (option the message is about, rule).
CROSS_RULES: tuple[tuple[str, Callable[[Mapping[str, Any]], str | None]], ...] = (
    ("orphan_timeout", orphan_rule),
    ("processes", reload_rule),
)


def resolve(given: Mapping[str, Any], setting: Callable[[str], Any]) -> dict[str, Any]:
    """Every option's effective value: ``given`` (a ``None`` counts as not given), else the
    Django setting through ``setting(name)`` (``NOT_SET`` when absent), else the default.

    Raises ``OptionError`` listing every problem, each labelled with where the value came
    from (the option's name, or its Django setting).
    """
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise OptionError([f"unknown worker option(s): {', '.join(unknown)}"])
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    problems: list[str] = []
    for option in OPTIONS:
        value, label = given.get(option.name), option.name
        if value is None and option.setting is not None:
            configured = setting(option.setting)
            if configured is not NOT_SET:
                value, label = configured, option.setting
        labels[option.name] = label
        if value is None:
            values[option.name] = option.default
            continue
        try:
            values[option.name] = option.check(value)
        except ValueError as exc:
            problems.append(f"{label} {exc}")
    if not problems:
        for name, rule in CROSS_RULES:
            broken = rule(values)
            if broken:
                problems.append(f"{labels[name]} {broken}")
    if problems:
        raise OptionError(problems)
    return values


def readme_table() -> str:
    """The table of worker flags (docs/reference/worker-options.md), from ``OPTIONS``."""
    lines = ["| flag | default | Django setting | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        flag = f"`{option.flag}`"
        if option.kind is bool:
            flag += f" / `--no-{option.flag[2:]}`"
        setting = f"`{option.setting}`" if option.setting else "—"
        lines.append(f"| {flag} | {option.shown_default} | {setting} | {option.help} |")
    return "\n".join(lines)
