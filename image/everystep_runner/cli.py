"""``everystep-runner [runner flags] [ROLE | MANAGEMENT COMMAND [ARGS…]]``

Roles: ``worker`` (the default), ``ui``, ``demo``, ``config`` (print every effective
setting and its source), ``healthcheck`` (for the image HEALTHCHECK). Anything else is
a Django management command of the user's project, so ``everystep-runner
everystep_worker --pool 8 --name $(POD_NAME) --drain 30`` or ``everystep-runner migrate``
work as they would with ``manage.py``.

Runner flags come before the role; everything after it belongs to the role or command.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from everystep_runner import project
from everystep_runner.settings import (
    ConfigError,
    RunnerSettings,
    describe,
    load,
    parse_flags,
    worker_options,
)

# Runner flags that take no value; every other runner flag takes one.
_SWITCHES = {"--notify", "--no-notify"}
USAGE = __doc__ or ""


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Runner flags (everything before the first bare word), and the role or command."""
    flags: list[str] = []
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        token = argv[index]
        flags.append(token)
        index += 1
        if token not in _SWITCHES and "=" not in token and index < len(argv):
            flags.append(argv[index])
            index += 1
    return flags, list(argv[index:])


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(USAGE.strip())
        return 0
    try:
        runner_flags, command = split_argv(argv)
        flags, unknown = parse_flags(runner_flags)
        if unknown:
            raise ConfigError(
                f"flags: unknown runner option {unknown[0]!r} (runner options "
                "go before the role; see everystep-runner --help)"
            )
        settings = load(flags)
    except ConfigError as exc:
        print(f"everystep-runner: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    role, rest = (command[0], command[1:]) if command else ("worker", [])
    try:
        return ROLES.get(role, _management)(settings, rest if role in ROLES else command)
    except project.ProjectError as exc:
        print(f"everystep-runner: {exc}", file=sys.stderr)
        return 2


def _worker(settings: RunnerSettings, args: list[str]) -> int:
    if args:
        print(
            f"everystep-runner: the worker role takes no arguments (got {args[0]!r}); "
            "put runner options before the role",
            file=sys.stderr,
        )
        return 2
    _setup(settings)
    from everystep.errors import EverystepError
    from everystep.worker import Worker

    try:
        worker = Worker(**worker_options(settings))
        clean = worker.run()
    except (ValueError, EverystepError) as exc:
        print(f"everystep-runner: {exc}", file=sys.stderr)
        return 2
    if not clean:
        # Runs still executing at the drain deadline were requeued; do not wait for
        # their threads.
        sys.stdout.flush()
        os._exit(0)
    return 0


def _ui(settings: RunnerSettings, args: list[str]) -> int:
    _setup(settings)
    from everystep_runner import ui

    return ui.serve(settings)


def _demo(settings: RunnerSettings, args: list[str]) -> int:
    from everystep_runner import demo

    return demo.run(settings, args)


def _config(settings: RunnerSettings, args: list[str]) -> int:
    for line in describe(settings):
        print(line)
    try:
        module = project.load(settings)
    except project.ProjectError as exc:
        print(f"project: NOT LOADABLE: {exc}")
        return 1
    from everystep.registry import registered_names

    names = registered_names()
    print(f"project: ok ({module}; {len(names)} workflow(s): {', '.join(names) or 'none'})")
    return 0


def _healthcheck(settings: RunnerSettings, args: list[str]) -> int:
    """Healthy if the worker's liveness endpoint or the UI answers 200."""
    ui_port = settings.ui_bind.rsplit(":", 1)[-1]
    urls = [f"http://127.0.0.1:{ui_port}/healthz"]
    if settings.metrics_port:
        urls.insert(0, f"http://127.0.0.1:{settings.metrics_port}/healthz")
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    print(f"healthy: {url}")
                    return 0
        except (urllib.error.URLError, OSError) as exc:
            print(f"not healthy: {url}: {exc}", file=sys.stderr)
    return 1


def _management(settings: RunnerSettings, command: list[str]) -> int:
    _setup(settings)
    from django.core.management import execute_from_command_line

    if command[0] == "everystep_worker":
        command = ["everystep_worker", *_worker_defaults(settings), *command[1:]]
    execute_from_command_line(["everystep-runner", *command])
    return 0


def _worker_defaults(settings: RunnerSettings) -> list[str]:
    """The runner's settings as everystep_worker flags; flags given after them win, so the
    seed's explicit argument list still has the last word."""
    options = worker_options(settings)
    defaults = [
        "--pool",
        str(options["pool_size"]),
        "--poll",
        str(options["poll"]),
        "--drain",
        str(options["drain"]),
        "--metrics-port",
        str(options["metrics_port"]),
        "--metrics-bind",
        options["metrics_bind"],
        "--heartbeat",
        str(options["heartbeat"]),
        "--orphan-timeout",
        str(options["orphan_timeout"]),
    ]
    if options["name"]:
        defaults += ["--name", options["name"]]
    if not options["notify"]:
        defaults.append("--no-notify")
    return defaults


def _setup(settings: RunnerSettings) -> None:
    project.load(settings)
    project.configure_logging(settings)


ROLES: dict[str, Callable[[RunnerSettings, list[str]], int]] = {
    "worker": _worker,
    "ui": _ui,
    "demo": _demo,
    "config": _config,
    "healthcheck": _healthcheck,
}
