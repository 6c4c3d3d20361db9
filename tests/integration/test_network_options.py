"""What ``network.configure`` writes into everystep's alias's OPTIONS (issue 50, item 6):
never into a dict another alias shares, and nothing the project's own configuration
outside OPTIONS decides (libpq's environment, a service, a MySQL option file)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from everystep import conf
from everystep.store import network

TIMEOUT = 30.0
TWIN = "everystep_twin"
PG_KEYS = set(network.libpq_parameters(TIMEOUT))
# What everystep adds to its alias's OPTIONS, per backend, with nothing set elsewhere.
ADDED = {"postgresql": PG_KEYS, "mysql": {"connect_timeout"}, "sqlite": set()}


@pytest.fixture
def alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """everystep's alias with its OPTIONS as the project wrote them and no libpq
    environment; afterwards the settings, the twin alias and everystep's keys as before."""
    for name in ("PGCONNECT_TIMEOUT", "PGSERVICE", "PGSERVICEFILE"):
        monkeypatch.delenv(name, raising=False)
    name = conf.database()
    network.configure(0)  # takes everystep's keys back
    settings = connections.settings[name]
    # A copy: a test may change the dict in place (a service added to it), which the next
    # connection of a later test would otherwise still carry.
    options = copy.deepcopy(settings["OPTIONS"])
    yield name
    connections.settings.pop(TWIN, None)
    connections.settings[name] = settings
    for conn in connections.all(initialized_only=True):
        if conn.alias == name:
            conn.settings_dict = settings
    settings["OPTIONS"] = options
    network.configure(conf.worker_default("network_timeout"))


def vendor(alias: str) -> str:
    return connections[alias].vendor


def options(alias: str) -> dict[str, Any]:
    return connections.settings[alias]["OPTIONS"]


def test_everystep_adds_its_keys_when_nothing_else_sets_them(alias):
    """The baseline the other tests depart from: every key of the backend is added."""
    theirs = dict(options(alias))
    network.configure(TIMEOUT)
    assert set(options(alias)) - set(theirs) == ADDED[vendor(alias)]


def test_an_options_dict_two_aliases_share_changes_only_for_everysteps(alias):
    """Two aliases holding one OPTIONS dict: the other alias's dict is left as it was,
    everystep's alias gets a dict of its own with its keys."""
    shared = dict(options(alias))
    before = dict(shared)
    connections.settings[alias]["OPTIONS"] = shared
    connections.settings[TWIN] = {**connections.settings[alias]}
    network.configure(TIMEOUT)
    assert connections.settings[TWIN]["OPTIONS"] is shared
    assert shared == before
    assert set(options(alias)) - set(before) == ADDED[vendor(alias)]
    network.configure(0)
    assert shared == before and options(alias) == before


def test_a_settings_dict_two_aliases_share_changes_only_for_everysteps(alias):
    """Two aliases holding one settings dict: everystep's alias gets its own copy (this
    thread's connection reads it too); the other alias's OPTIONS stay as they were."""
    twin = connections.settings[TWIN] = connections.settings[alias]
    before = dict(twin["OPTIONS"])
    network.configure(TIMEOUT)
    assert twin["OPTIONS"] == before
    assert set(options(alias)) - set(before) == ADDED[vendor(alias)]
    if ADDED[vendor(alias)]:
        assert connections.settings[alias] is not twin
        assert connections[alias].settings_dict is connections.settings[alias]
        assert connections.settings[alias]["NAME"] == twin["NAME"]


@pytest.mark.backends("postgres", "mariadb")
def test_a_key_the_project_set_in_options_is_kept_through_reconfiguring(alias):
    """A project's ``connect_timeout`` stays as set, at every timeout, and 0 takes back
    only what everystep added."""
    options(alias)["connect_timeout"] = 5
    theirs = dict(options(alias))
    network.configure(TIMEOUT)
    network.configure(TIMEOUT / 2)
    assert options(alias)["connect_timeout"] == 5
    network.configure(0)
    assert options(alias) == theirs


@pytest.mark.backends("sqlite")
def test_sqlite_options_are_not_touched(alias):
    """SQLite has no network: its OPTIONS dict stays the very same object, unchanged."""
    before = options(alias)
    snapshot = dict(before)
    network.configure(TIMEOUT)
    assert options(alias) is before and before == snapshot


def libpq_value(alias: str, keyword: str) -> str | None:
    """``keyword`` as libpq used it on a new real connection of ``alias``."""
    conn = connections.create_connection(alias)
    try:
        conn.ensure_connection()
        used = {o.keyword.decode(): o.val for o in conn.connection.pgconn.info}
    finally:
        conn.close()
    value = used[keyword]
    return None if value is None else value.decode()


@pytest.mark.backends("postgres")
@pytest.mark.django_db
def test_pgconnect_timeout_wins_over_everysteps_connect_timeout(alias, monkeypatch):
    """With PGCONNECT_TIMEOUT set, no connect_timeout is written, and a real connection
    uses the environment's value; the keepalives are still set."""
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "7")
    network.configure(TIMEOUT)
    assert "connect_timeout" not in options(alias)
    assert PG_KEYS - {"connect_timeout"} <= set(options(alias))
    assert libpq_value(alias, "connect_timeout") == "7"
    assert libpq_value(alias, "keepalives_idle") == str(int(TIMEOUT / 3))


@pytest.mark.backends("postgres")
@pytest.mark.django_db
def test_without_pgconnect_timeout_a_real_connection_uses_everysteps(alias):
    """The same connection with nothing in the environment uses everystep's value."""
    network.configure(TIMEOUT)
    assert libpq_value(alias, "connect_timeout") == str(int(TIMEOUT))


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("where", ["options", "PGSERVICE"])
def test_a_service_gets_no_libpq_parameter_from_everystep(alias, monkeypatch, where):
    """A connection naming a service (in OPTIONS or by PGSERVICE) gets none of
    everystep's parameters: the service file may set them."""
    if where == "options":
        options(alias)["service"] = "everystep_test"
    else:
        monkeypatch.setenv("PGSERVICE", "everystep_test")
    theirs = dict(options(alias))
    network.configure(TIMEOUT)
    assert options(alias) == theirs


@pytest.mark.backends("postgres")
def test_connect_timeout_is_the_only_parameter_libpq_reads_from_the_environment():
    """What ``configure`` assumes of libpq: of its parameters only connect_timeout has an
    environment variable (and a service, PGSERVICE)."""
    from psycopg import pq

    envvars = {o.keyword.decode(): o.envvar for o in pq.Conninfo.get_defaults()}
    assert {key: envvars[key] for key in PG_KEYS if envvars[key]} == {
        "connect_timeout": b"PGCONNECT_TIMEOUT"
    }
    assert envvars["service"] == b"PGSERVICE"


@pytest.mark.backends("mariadb")
@pytest.mark.parametrize("key", ["read_default_file", "read_default_group"])
def test_a_mysql_option_file_keeps_its_connect_timeout(alias, key, tmp_path):
    """OPTIONS naming an option file (which may set connect-timeout): no connect_timeout
    is written."""
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[client]\nconnect-timeout=7\n")
    options(alias)[key] = str(cnf) if key == "read_default_file" else "client"
    theirs = dict(options(alias))
    network.configure(TIMEOUT)
    assert options(alias) == theirs
