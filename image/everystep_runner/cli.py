"""``everystep-runner [runner flags] [ROLE | MANAGEMENT COMMAND [ARGS…]]``

Roles: ``worker`` (the default), ``ui``, ``demo``, ``config`` (print every effective
setting and its source), ``healthcheck`` (for the image HEALTHCHECK), ``check-replay
[ARGS…]`` (``everystep_check_replay``: before a rollout, replay the unfinished runs
against this image's code; exit status 1 if any would fail). Anything else is
a Django management command of the user's project, so ``everystep-runner
everystep_worker --pool 8 --name $(POD_NAME) --drain 30`` or ``everystep-runner migrate``
work as they would with ``manage.py``.

Runner flags come before the role; everything after it belongs to the role or command.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from everystep_runner import project, sqlite_files
from everystep_runner.settings import (
    BY_KEY,
    CONFIG_ENV,
    DEFAULT_CONFIG,
    EXPECTED,
    NAMES,
    ConfigError,
    RunnerSettings,
    describe,
    fallback,
    load,
    probe_address,
    unknown_variables,
    worker_flags,
    worker_options,
)

USAGE = __doc__ or ""


class _Parser(argparse.ArgumentParser):
    """Raises ``ConfigError`` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"flags: {message}")


def parser() -> argparse.ArgumentParser:
    """The runner flags, then the role or management command with everything after it.

    A flag not given is absent from the namespace, so it overrides nothing; values stay
    strings (``--notify``/``--no-notify`` give True/False) for the settings model to check,
    so a bad value gets the same message from any source. No abbreviations: a management
    command's own ``--database`` must not be taken for ``--database-url``.
    """
    parser = _Parser(
        prog="everystep-runner",
        usage="%(prog)s [runner flags] [ROLE | MANAGEMENT COMMAND [ARGS…]]",
        # The module docstring, without its reStructuredText quoting: a terminal shows
        # ``worker`` literally.
        description=USAGE.split("\n", 2)[2].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    flags = parser.add_argument_group("runner flags (each also EVERYSTEP_<NAME> or a TOML key)")
    absent = argparse.SUPPRESS
    config_help = f"TOML file; env {CONFIG_ENV}; default {DEFAULT_CONFIG}"
    flags.add_argument("--config", default=absent, help=config_help)
    for name in NAMES:
        option = BY_KEY.get(name)
        if option is None:
            default = RunnerSettings.model_fields[name].default
            help_text = EXPECTED[name] + ("" if default is None else f"; default {default}")
        else:
            help_text = f"{option.help}; unset: {fallback(option)}"
        boolean = option is not None and option.kind is bool
        action: Any = argparse.BooleanOptionalAction if boolean else "store"
        flag = "--" + name.replace("_", "-")
        flags.add_argument(flag, dest=name, action=action, default=absent, help=help_text)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="role or management command")
    return parser


def split_argv(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The runner flags (setting name → value, for ``load``), and the role or management
    command with its own arguments."""
    namespace, unknown = parser().parse_known_args(list(argv))
    if unknown:
        raise ConfigError(
            f"flags: unknown runner option {unknown[0]!r} (runner options "
            "go before the role; see everystep-runner --help)"
        )
    flags = vars(namespace)
    command: list[str] = flags.pop("command")
    return flags, command[1:] if command[:1] == ["--"] else command


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # Files this process creates (a SQLite database and its journals) are group-writable:
    # another UID of group 0 (an arbitrary UID on OpenShift) can write them too.
    os.umask(0o002)
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(parser().format_help())
        return 0
    try:
        flags, command = split_argv(argv)
        settings = load(flags)
    except ConfigError as exc:
        print(f"everystep-runner: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    for line in unknown_variables(os.environ):
        print(f"everystep-runner: warning: {line}", file=sys.stderr)
    role, args = (command[0], command[1:]) if command else ("worker", [])
    if role in COMMAND_ROLES:
        command = [COMMAND_ROLES[role], *args]
        role = command[0]
    if role in ROLES and args:
        print(
            f"everystep-runner: the {role} role takes no arguments (got {args[0]!r}); "
            "put runner options before the role",
            file=sys.stderr,
        )
        return 2
    try:
        return ROLES[role](settings) if role in ROLES else _management(settings, command)
    except project.ProjectError as exc:
        print(f"everystep-runner: {exc}", file=sys.stderr)
        return 2


def _worker(settings: RunnerSettings) -> int:
    _setup(settings, worker=True)
    from everystep.errors import EverystepError, NameInUse
    from everystep.worker import Worker, reload
    from everystep.worker.processes import GroupStopped

    try:
        worker = Worker(**worker_options(settings))
        if worker.options.reload and not reload.in_child():
            return reload.supervise()  # the parent: it never touches the database
        clean, code = reload.run_watched(worker) if worker.options.reload else (worker.run(), 0)
    except (NameInUse, GroupStopped) as exc:
        # Not a configuration error: the name is right, another live process holds it
        # (GroupStopped: one child's name, NAME/k). Exit 1, as `manage.py
        # everystep_worker` does.
        print(f"everystep-runner: {exc}", file=sys.stderr)
        return 1
    except (ValueError, EverystepError) as exc:
        print(f"everystep-runner: {exc}", file=sys.stderr)
        return 2
    if not clean or code:
        # Runs still executing at the drain deadline were requeued; do not wait for
        # their threads.
        sys.stdout.flush()
        os._exit(code)
    return 0


def _ui(settings: RunnerSettings) -> int:
    _setup(settings)
    from everystep_runner import ui

    return ui.serve(settings)


def _demo(settings: RunnerSettings) -> int:
    from everystep_runner import demo

    return demo.run(settings)


def _config(settings: RunnerSettings) -> int:
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


def _healthcheck(settings: RunnerSettings) -> int:
    """Healthy if the probe port (the worker's, or the ui role's own listener) or the UI
    answers 200."""
    ui_port = settings.ui_bind.rsplit(":", 1)[-1]
    urls = [f"http://127.0.0.1:{ui_port}/healthz"]
    if address := probe_address(settings):
        host = "127.0.0.1" if address[0] in ("0.0.0.0", "", "::") else address[0]
        host = f"[{host}]" if ":" in host else host
        urls.insert(0, f"http://{host}:{address[1]}/healthz")
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
    _setup(settings, worker=command[0] == "everystep_worker")
    from django.core.management import execute_from_command_line

    if command[0] == "everystep_worker":
        # The worker options the runner was given, as flags; explicit arguments come after
        # them and win, so a manifest's argument list still has the last word.
        command = ["everystep_worker", *worker_flags(settings), *command[1:]]
    execute_from_command_line(["everystep-runner", *command])
    return 0


def _setup(settings: RunnerSettings, *, worker: bool = False) -> None:
    """Load the project and apply the log settings. A SQLite database this process cannot
    write is one line (exit 2), or for a worker a line and a wait until it can."""
    project.load(settings)
    project.configure_logging(settings)
    problem = sqlite_files.ready(wait=worker)
    if problem is not None:
        raise project.ProjectError(problem)


# Roles that are a management command under a name that reads well in a pipeline; they
# take the command's arguments.
COMMAND_ROLES = {"check-replay": "everystep_check_replay"}

ROLES: dict[str, Callable[[RunnerSettings], int]] = {
    "worker": _worker,
    "ui": _ui,
    "demo": _demo,
    "config": _config,
    "healthcheck": _healthcheck,
}
