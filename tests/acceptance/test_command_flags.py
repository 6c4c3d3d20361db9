"""No everystep command takes an abbreviated flag: ``everystep_worker --pol 8`` is not
``--poll 8`` (nor ``--pool 8``) but an error naming ``--pol``, from the command line and
from every long flag of every command's parser."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, get_commands, load_command_class

from tests.workers import manage, worker_env

pytestmark = pytest.mark.tiers("pooler")

UNKNOWN = "01a22f98-917e-79a0-9268-3f7c8434cff5"

# Each everystep command with the arguments it needs to parse, then an abbreviation of
# one of its own flags (with the flag's value, if it takes one) last.
TYPOS: dict[str, list[str]] = {
    "everystep_cancel": [UNKNOWN, "--reas", "typo"],
    "everystep_check_replay": ["--lim", "5"],
    "everystep_fork": [UNKNOWN, "--from", "2"],
    "everystep_prune": ["--older-than", "30", "--dry"],
    "everystep_requeue": [UNKNOWN, "--reas", "typo"],
    "everystep_requeue_runner": ["w1", "--forc"],
    "everystep_resolve_step": [UNKNOWN, "1", "--discard", "--reas", "typo"],
    "everystep_runs": ["--js"],
    "everystep_send": [UNKNOWN, "go", "--pay", "1"],
    "everystep_show": [UNKNOWN, "--js"],
    "everystep_worker": ["--pol", "8"],
}
# What each command needs to parse at all, before the abbreviation is added.
NEEDS = {
    "everystep_prune": ["--older-than", "30"],
    "everystep_requeue_runner": ["w1"],
    "everystep_resolve_step": [UNKNOWN, "1", "--discard"],
    "everystep_send": [UNKNOWN, "go"],
    "everystep_show": [UNKNOWN],
}


def everystep_commands() -> list[str]:
    return sorted(name for name, app in get_commands().items() if app == "everystep")


def abbreviations() -> list[Any]:
    """Every (command, long flag's longest proper prefix that names only that flag)."""
    cases = []
    for name in everystep_commands():
        parser = load_command_class("everystep", name).create_parser("manage.py", name)
        flags = [flag for flag in parser._option_string_actions if flag.startswith("--")]
        for flag in flags:
            prefix = flag[:-1]
            # Only a prefix argparse would have taken for the flag tests the rule.
            if [other for other in flags if other.startswith(prefix)] == [flag]:
                cases.append(pytest.param(name, prefix, id=f"{name}{flag}"))
    return cases


def test_every_command_has_a_typo_case() -> None:
    """The command-line cases below cover every everystep command."""
    assert sorted(TYPOS) == everystep_commands()


@pytest.mark.parametrize(("name", "argv"), list(TYPOS.items()), ids=list(TYPOS))
def test_abbreviated_flag_exits_naming_it(name: str, argv: list[str]) -> None:
    """From the shell, an abbreviation of a command's own flag exits 2 naming it and
    does nothing (``everystep_worker --pol 8`` starts no worker)."""
    done = manage(worker_env(), name, *argv, timeout=60)
    stderr = done.stderr
    typo = next(arg for arg in reversed(argv) if arg.startswith("--"))
    assert done.returncode == 2, stderr
    assert stderr.splitlines()[-1].endswith(
        f"error: unrecognized arguments: {' '.join(argv[argv.index(typo) :])}"
    ), stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("name", "prefix"), abbreviations())
def test_no_flag_of_any_command_abbreviates(name: str, prefix: str) -> None:
    """Every long flag of every everystep command (Django's own too), cut short by one
    character, is refused by the command's parser as an unknown flag."""
    parser = load_command_class("everystep", name).create_parser("manage.py", name)
    with pytest.raises(CommandError, match=f"^Error: unrecognized arguments: {prefix}$"):
        parser.parse_args([*NEEDS.get(name, []), prefix])
