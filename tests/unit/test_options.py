"""The one declaration of the worker options, and every edge held to it."""

from __future__ import annotations

import dataclasses
import inspect
import socket
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.test import override_settings

from everystep import checks, conf, options
from everystep.options import BY_NAME, OPTIONS, OptionError, resolve
from everystep.worker import Worker
from everystep.worker.worker_state import WorkerOptions

# The worker options table lives on this documentation page (it was the README's).
OPTIONS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "worker-options.md"


def nothing_configured(name: str) -> object:
    return options.NOT_SET


def test_documented_table_is_the_declared_options():
    """The docs' worker flag table is exactly what OPTIONS renders (no drift)."""
    assert options.readme_table() in OPTIONS_PAGE.read_text(encoding="utf-8"), (
        "docs/reference/worker-options.md's table differs from everystep.options; paste "
        "options.readme_table() into it"
    )


def test_worker_signature_defaults_are_the_declared_defaults():
    """Worker's keyword defaults are the declared ones, or None where a Django setting
    (or a computed default) may supply the value."""
    parameters = inspect.signature(Worker).parameters
    assert set(parameters) == set(BY_NAME)
    for option in OPTIONS:
        default = parameters[option.name].default
        if option.setting is not None or option.default is None:
            assert default is None, option.name
        else:
            assert default == option.default, option.name


def test_worker_options_hold_one_field_per_declared_option():
    """WorkerOptions has a field for every declared option, under its name, and no other."""
    assert [field.name for field in dataclasses.fields(WorkerOptions)] == list(BY_NAME)


def test_a_worker_keeps_one_frozen_options_object_shared_with_its_state():
    """Worker resolves its options once; its state holds that same frozen object."""
    worker = Worker(pool_size=3, name="once")
    assert worker.state.options is worker.options
    assert (worker.options.pool_size, worker.options.name) == (3, "once")
    with pytest.raises(dataclasses.FrozenInstanceError):
        worker.options.pool_size = 5  # type: ignore[misc]


def test_an_unnamed_worker_takes_the_hostname():
    """A worker given no name takes the hostname as its runner name."""
    assert WorkerOptions.resolve().name == socket.gethostname()


def test_command_flags_are_generated_from_the_options():
    """manage.py everystep_worker has one flag per option, with its default left unset."""
    command = load_command_class("everystep", "everystep_worker")
    parser = command.create_parser("manage.py", "everystep_worker")
    for option in OPTIONS:
        action = next(a for a in parser._actions if option.flag in a.option_strings)
        assert action.dest == option.name and action.default is None


def test_resolve_precedence_given_then_setting_then_default():
    """A given value beats the Django setting, which beats the default."""
    settings = {"EVERYSTEP_HEARTBEAT": 2.0}

    def configured(name: str) -> object:
        return settings.get(name, options.NOT_SET)

    assert resolve({}, configured)["heartbeat"] == 2.0
    assert resolve({"heartbeat": 3}, configured)["heartbeat"] == 3.0
    assert resolve({}, nothing_configured)["heartbeat"] == 5.0
    assert resolve({"heartbeat": None}, nothing_configured)["heartbeat"] == 5.0


@pytest.mark.parametrize(
    "given, message",
    [
        ({"pool_size": 0}, "pool_size must be an integer >= 1, got 0"),
        ({"pool_size": True}, "pool_size must be an integer >= 1, got True"),
        ({"pool_size": 2.5}, "pool_size must be an integer >= 1"),
        ({"poll": 0}, "poll must be a number > 0"),
        ({"poll": float("nan")}, "poll must be a number > 0"),
        ({"heartbeat": 0}, "heartbeat must be a number > 0"),
        ({"metrics_port": 65536}, "metrics_port must be an integer from 0 to 65535"),
        ({"name": " "}, "name must be a non-empty string of at most 255 characters"),
        ({"name": "x" * 256}, "name must be a non-empty string of at most 255 characters"),
        ({"notify": "yes"}, "notify must be True or False"),
        ({"heartbeat": 5, "orphan_timeout": 10}, "orphan_timeout must be more than twice"),
        ({"bogus": 1}, "unknown worker option(s): bogus"),
        # Sanity caps: beyond them threads cannot be started or timer waits overflow.
        ({"pool_size": 10**20}, "pool_size must be at most 10000"),
        ({"poll": 1e308}, "poll must be at most 604800"),
        ({"drain": 1e9}, "drain must be at most 604800"),
        # A name is written to the run rows: PostgreSQL cannot store a NUL.
        ({"name": "a\x00b"}, "name must not contain a NUL character or a lone surrogate"),
        ({"name": "a\udcffb"}, "name must not contain a NUL character or a lone surrogate"),
    ],
)
def test_resolve_refuses_values_outside_the_limits(given, message):
    """Each limit and cross-option rule is refused with a message naming the option."""
    with pytest.raises(OptionError) as caught:
        resolve(given, nothing_configured)
    assert message in str(caught.value)


def test_orphan_timeout_zero_turns_recovery_off_whatever_the_heartbeat():
    """0 is always accepted for orphan_timeout: it means no orphan recovery."""
    assert (
        resolve({"heartbeat": 100, "orphan_timeout": 0}, nothing_configured)["orphan_timeout"]
        == 0.0
    )


@override_settings(EVERYSTEP_HEARTBEAT=0)
def test_system_check_and_worker_agree_on_a_zero_heartbeat():
    """A value the system check refuses is one Worker refuses, with the setting named."""
    errors = checks.check_settings()
    assert [error.id for error in errors] == ["everystep.E003"]
    assert "EVERYSTEP_HEARTBEAT must be a number > 0" in errors[0].msg
    with pytest.raises(ValueError, match="EVERYSTEP_HEARTBEAT must be a number > 0"):
        Worker()


@override_settings(EVERYSTEP_HEARTBEAT=30, EVERYSTEP_ORPHAN_TIMEOUT=45)
def test_system_check_applies_the_cross_option_rule():
    """The orphan timeout vs heartbeat rule is one rule, seen by checks and Worker alike."""
    errors = checks.check_settings()
    assert len(errors) == 1 and "EVERYSTEP_ORPHAN_TIMEOUT must be more than twice" in errors[0].msg
    with pytest.raises(ValueError, match="more than twice heartbeat"):
        Worker()
    assert Worker(orphan_timeout=0).options.orphan_timeout == 0.0


@override_settings(EVERYSTEP_HEARTBEAT=1.5, EVERYSTEP_NOTIFY=False)
def test_worker_reads_django_settings_for_options_not_given():
    """An option not given comes from its Django setting; a given one wins."""
    worker = Worker()
    assert (worker.options.heartbeat, worker.options.notify) == (1.5, False)
    assert Worker(heartbeat=4, notify=True).options.heartbeat == 4.0
    assert conf.worker_default("heartbeat") == 1.5


def test_liveness_timeout_default_follows_poll():
    """Without a liveness timeout the worker allows max(60 s, 10 polls) between ticks."""
    assert Worker(poll=10).options.liveness_timeout == 100.0
    assert Worker().options.liveness_timeout == 60.0
    assert Worker(liveness_timeout=5).options.liveness_timeout == 5.0
