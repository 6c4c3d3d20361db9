"""The lifecycle signals' contract: a project's receivers hear every run and step with the
documented arguments, and everystep's own logging and metrics are called directly
(``Lifecycle.subscribe``), not as receivers of the Django signal."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from everystep import logs, metrics, schedule, signals
from everystep.engine.core.pass_state import RunState
from everystep.testing import run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = ("add", "double", "pair", "peek")  # wf.sequential's


@pytest.fixture
def heard() -> Iterator[list[tuple[str, Any, dict[str, Any]]]]:
    """(signal, sender, arguments) of every run_started, step_recorded and run_finished
    sent while the test runs, in order."""
    seen: list[tuple[str, Any, dict[str, Any]]] = []
    watched = {"started": signals.run_started, "step": signals.step_recorded}
    watched["finished"] = signals.run_finished

    def receiver_for(name: str) -> Any:
        def receive(sender: Any, signal: Any, **kwargs: Any) -> None:
            seen.append((name, sender, kwargs))

        return receive

    receivers = {name: receiver_for(name) for name in watched}
    for name, signal in watched.items():
        signal.connect(receivers[name], dispatch_uid=f"test.heard.{name}")
    yield seen
    for name, signal in watched.items():
        signal.disconnect(dispatch_uid=f"test.heard.{name}")


def test_a_project_receiver_hears_every_run_and_step_with_the_documented_arguments(heard):
    run = schedule(wf.sequential, 2, 3)
    run_due()
    names = [name for name, _, _ in heard]
    assert names == ["started", "step", "step", "step", "step", "finished"]  # add … peek
    assert {sender for _, sender, _ in heard} == {RunState}
    for _, _, kwargs in heard:
        assert kwargs["run_id"] == run.id
        assert kwargs["workflow"] == "tests.testapp.workflows.sequential"
        assert kwargs["runner"]
    assert heard[0][2]["replayed_steps"] == 0
    steps = [kwargs for name, _, kwargs in heard if name == "step"]
    assert [s["status"] for s in steps] == ["done"] * 4
    assert [s["step"] for s in steps] == [f"tests.testapp.workflows.{n}" for n in STEPS]
    assert all(set(s) >= {"step_id", "step", "duration"} for s in steps)
    finished = heard[-1][2]
    assert finished["status"] == "completed"
    assert finished["error"] is None and finished["exc"] is None
    assert finished["duration"] >= 0


def test_everystep_logs_and_counts_a_run_without_being_a_receiver(caplog):
    """The Django signals have no receiver of everystep's own: a project that connects
    none pays no dispatch, and its logs and metrics still see every run."""
    metrics.install()
    lifecycle = [signals.run_started, signals.step_recorded, signals.run_finished]
    assert not any(signal.has_listeners(RunState) for signal in lifecycle)
    assert logs._on_run_finished in signals.run_finished.hooks
    assert metrics._on_step_recorded in signals.step_recorded.hooks
    workflow = "tests.testapp.workflows.sequential"

    def steps_counted() -> float:
        value = metrics.prometheus_client.REGISTRY.get_sample_value(
            "everystep_step_runs_total",
            {"workflow": workflow, "step": f"{wf.__name__}.double", "status": "done"},
        )
        return value or 0.0

    before = steps_counted()
    with caplog.at_level(logging.INFO, logger="everystep.run"):
        run = schedule(wf.sequential, 2, 3)
        run_due()
    assert steps_counted() == before + 1
    (line,) = [r for r in caplog.records if getattr(r, "event", "") == "run.completed"]
    assert line.run_id == str(run.id)


def test_subscribing_twice_calls_a_hook_once():
    calls: list[dict[str, Any]] = []

    def hook(kwargs: dict[str, Any]) -> None:
        calls.append(kwargs)

    signal = signals.Lifecycle()
    signal.subscribe(hook)
    signal.subscribe(hook)
    signal.emit(sender=RunState, run_id=1)
    assert calls == [{"run_id": 1}]
