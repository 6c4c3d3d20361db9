from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test marked ``exclusive`` runs, setup and teardown included, with no other test
    that uses its database server beside it, in any session (tests/exclusive.py)."""
    from tests.exclusive import held, rooms

    extra = [name for marker in item.iter_markers("servers") for name in marker.args]
    with held(rooms(extra), alone=item.get_closest_marker("exclusive") is not None):
        return (yield)


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix() -> None:
    """tests/settings.py names each pytest-xdist worker's database itself (its worker
    subprocesses must find it): pytest-django's suffix would be a second one."""


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see a developer's EVERYSTEP_* configuration (test DB coordinates aside)."""
    for key in list(os.environ):
        if key.startswith("EVERYSTEP_") and not key.startswith("EVERYSTEP_TEST_"):
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test databases, and on PostgreSQL two things PgBouncer needs: the
    "direct" alias of the pooler mode pointed at PostgreSQL itself again (the test
    database is created through the pooler, and a mirror would copy its port), and, at
    the end, the pooler's server connections to the test database closed, which would
    otherwise make DROP DATABASE fail."""
    from django.db import connections

    if "direct" in connections.settings:
        from django.conf import settings

        connections["direct"].settings_dict = {
            **connections["default"].settings_dict,
            "PORT": settings.DATABASES["direct"]["PORT"],
        }
    yield
    if os.environ.get("EVERYSTEP_TEST_DB") == "postgres":
        with django_db_blocker.unblock():
            _close_other_sessions(connections["default"].settings_dict["NAME"])


def _close_other_sessions(database: str) -> None:
    """Close every session on ``database`` but this one."""
    from tests import pgadmin

    pgadmin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        [database],
    )


@pytest.fixture(autouse=True)
def _close_shared_sync_thread_connections() -> Iterator[None]:
    """``asyncio.run(aschedule(...))`` in a test runs the ORM on asgiref's one shared
    thread for sync code (no outer ``async_to_sync``), whose connection would outlive
    the test: broken by a later test that kills the database's sessions, it failed the
    next test to use that thread. Each test leaves it closed."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    executor = getattr(SyncToAsync, "single_thread_executor", None)
    if executor is not None and getattr(executor, "_threads", None):
        executor.submit(connections.close_all).result(timeout=30)


@pytest.fixture(autouse=True)
def _reset_test_workflows() -> None:
    from tests.testapp import workflows

    workflows.CALLS.clear()
    workflows.EVOLVED["on"] = False


@pytest.fixture
def blocked_run():
    """A run of ``payment`` blocked on its unsafe ``charge`` step (step 2)."""
    from everystep import schedule
    from everystep.testing import crash_after, run_due
    from tests.testapp import workflows as wf

    run = schedule(wf.payment, 100)
    with crash_after(wf.charge):
        run_due()
    run_due()
    run.refresh_from_db()
    assert run.status == "blocked"
    return run


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true a skipped test is a failure: it would hide a missing backend. The
    controller (or the only process) removes the session's own lock files."""
    if not hasattr(session.config, "workerinput") and "EVERYSTEP_TEST_DB_SUFFIX" in os.environ:
        from tests.exclusive import forget_session_rooms

        forget_session_rooms()
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped:
        print(f"\nCI=true: {skipped} test(s) skipped; failing the run.")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        help="only the tests marked tiers(NAME): what a tier of `make test` runs again",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names): only meaningful on these databases (sqlite, postgres, mariadb); "
        "deselected, not skipped, on the others",
    )
    config.addinivalue_line(
        "markers",
        "tiers(*names): the tiers of `make test` that run this test once more under their "
        "configuration (modes, pooler, several); `pytest --tier NAME` selects them",
    )
    config.addinivalue_line(
        "markers",
        "exclusive: stops or restarts its database server: no test that uses that server "
        "runs beside it, in any session (tests/exclusive.py)",
    )
    config.addinivalue_line(
        "markers",
        "servers(*names): database servers (postgres, mariadb) the test uses besides its "
        "session's EVERYSTEP_TEST_DB, so that no exclusive test stops them under it",
    )
    config.addinivalue_line(
        "markers",
        "several_databases: only under EVERYSTEP_TEST_ALIAS (make several-databases); "
        "deselected, not skipped, otherwise",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of a database-specific feature (NOTIFY, a server restart) are deselected on
    the other backends, so that a skip always means something is missing; under
    ``--tier NAME``, so is every test not marked ``tiers(NAME)``."""
    _allow_everystep_alias(items)
    backend = os.environ.get("EVERYSTEP_TEST_DB", "sqlite")
    tier = config.getoption("--tier")
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("backends")
        several = item.get_closest_marker("several_databases") is not None
        wanted = not several or bool(os.environ.get("EVERYSTEP_TEST_ALIAS"))
        if tier is not None:
            wanted = wanted and any(tier in m.args for m in item.iter_markers("tiers"))
        (keep if wanted and (marker is None or backend in marker.args) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _allow_everystep_alias(items: list[pytest.Item]) -> None:
    """Under EVERYSTEP_TEST_ALIAS (several databases, tests/settings.py) everystep's
    statements go to that alias: every database test may query it too."""
    alias = os.environ.get("EVERYSTEP_TEST_ALIAS")
    if not alias:
        return
    for item in items:
        marker = item.get_closest_marker("django_db")
        databases = None if marker is None else marker.kwargs.get("databases")
        if marker is None or databases == "__all__":
            continue
        wanted = [*(databases or ["default"]), alias]
        # Prepended: get_closest_marker reads an item's own markers first to last.
        item.add_marker(
            pytest.mark.django_db(*marker.args, **{**marker.kwargs, "databases": wanted}),
            append=False,
        )
