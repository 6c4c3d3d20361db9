from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see a developer's EVERYSTEP_* configuration (test DB coordinates aside)."""
    for key in list(os.environ):
        if key.startswith("EVERYSTEP_") and not key.startswith("EVERYSTEP_TEST_"):
            monkeypatch.delenv(key)


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
    """Under CI=true a skipped test is a failure: it would hide a missing backend."""
    if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped:
        print(f"\nCI=true: {skipped} test(s) skipped; failing the run.")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names): only meaningful on these databases (sqlite, postgres, mariadb); "
        "deselected, not skipped, on the others",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of a database-specific feature (NOTIFY, a server restart) are deselected on
    the other backends, so that a skip always means something is missing."""
    backend = os.environ.get("EVERYSTEP_TEST_DB", "sqlite")
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("backends")
        (keep if marker is None or backend in marker.args else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
