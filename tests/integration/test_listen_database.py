"""``EVERYSTEP_LISTEN_DATABASE``: which alias the workers LISTEN on, and its system check."""

from __future__ import annotations

import pytest
from django.test import override_settings

from everystep import conf
from everystep.checks import check_settings
from everystep.store.wake import can_listen


def ids(name: str) -> list[str]:
    return [error.id for error in check_settings() if name in error.msg]


def test_unset_listens_on_everysteps_own_alias():
    assert conf.listen_database() == conf.database() == "default"
    assert ids("EVERYSTEP_LISTEN_DATABASE") == []


@override_settings(EVERYSTEP_LISTEN_DATABASE="nowhere")
def test_an_unknown_alias_is_a_system_check_error_and_nothing_listens():
    assert ids("EVERYSTEP_LISTEN_DATABASE") == ["everystep.E007"]
    assert conf.listen_database() is None
    assert not can_listen()


@override_settings(EVERYSTEP_LISTEN_DATABASE="aside")
def test_an_alias_that_is_not_postgresql_is_refused():
    # "aside" is the test settings' SQLite database.
    [error] = [e for e in check_settings() if e.id == "everystep.E007"]
    assert "not a PostgreSQL database" in error.msg
    assert not can_listen()


@pytest.mark.backends("postgres")
@override_settings(EVERYSTEP_LISTEN_DATABASE="default")
def test_a_postgresql_alias_listens():
    assert ids("EVERYSTEP_LISTEN_DATABASE") == []
    assert can_listen()
