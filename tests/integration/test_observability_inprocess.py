"""Sentry reporting, JSON logs and the liveness probe, in this process."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.transport import Transport

from everystep import schedule
from everystep.engine import execute
from everystep.engine.execute import run_pass
from everystep.logs import JsonFormatter
from everystep.store.claims import claim_due
from everystep.testing import crash_after, run_due
from everystep.worker import loop
from tests.acceptance.conftest import free_port, http_get
from tests.integration.test_worker_embedded import wait_for
from tests.testapp import workflows as wf
from tests.workers import worker_on_thread

pytestmark = pytest.mark.django_db(transaction=True)


class CapturingTransport(Transport):
    """Keeps events in memory: a real sentry_sdk client, no network."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Any) -> None:
        for item in envelope.items:
            if item.type == "event":
                self.events.append(item.payload.json)


@pytest.fixture
def sentry_events() -> Iterator[list[dict[str, Any]]]:
    transport = CapturingTransport()
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1", transport=transport, default_integrations=False
    )
    yield transport.events
    sentry_sdk.init()  # an inactive client: reporting off again


def test_sentry_captures_failures_only(sentry_events, monkeypatch):
    """Failed runs and engine crashes are captured once with run context; Terminal,
    blocked runs and drain requeues are not."""
    failing = schedule(wf.failing)
    schedule(wf.stop_from_step)
    blocked = schedule(wf.payment, 1)
    with crash_after(wf.charge):
        run_due()
    run_due()
    drained = schedule(wf.sequential, 1, 1)
    (held,) = claim_due("drainer", 1)
    assert run_pass(held, should_drain=lambda: True).status == "requeued"
    drained.refresh_from_db()
    blocked.refresh_from_db()
    assert (drained.status, blocked.status) == ("scheduled", "blocked")

    crashing = schedule(wf.named)
    real = execute.registry.lookup
    monkeypatch.setattr(
        execute.registry,
        "lookup",
        lambda name: (
            (_ for _ in ()).throw(RuntimeError("engine bug"))
            if name == crashing.name
            else real(name)
        ),
    )
    with worker_on_thread(name="sentry-worker"):
        wait_for(
            lambda: not type(crashing).objects.filter(status__in=["scheduled", "running"]).exists()
        )
    sentry_sdk.flush()

    by_run = {e["tags"]["everystep.run_id"]: e for e in sentry_events}
    assert sorted(by_run) == sorted([str(failing.id), str(crashing.id)])
    assert len(sentry_events) == 2, "each failure is captured exactly once"
    failed_event = by_run[str(failing.id)]
    assert failed_event["tags"]["everystep.workflow"] == "tests.testapp.workflows.failing"
    assert failed_event["exception"]["values"][-1]["type"] == "ValueError"
    crash_event = by_run[str(crashing.id)]
    assert crash_event["tags"]["everystep.runner"] == "sentry-worker"
    assert crash_event["exception"]["values"][-1]["value"] == "engine bug"


def test_json_logs_are_one_object_per_line_with_run_fields():
    """The JSON formatter writes one parseable object per line with run id, workflow, runner."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("everystep")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        ok = schedule(wf.sequential, 1, 2)
        bad = schedule(wf.failing)
        run_due(runner="json-runner")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert records, "something was logged"
    about_runs = [r for r in records if "run_id" in r]
    assert {r["event"] for r in about_runs} >= {
        "run.pass_started",
        "step.recorded",
        "run.completed",
        "run.failed",
    }
    for record in about_runs:
        assert record["workflow"].startswith("tests.testapp.workflows.")
        assert record["runner"] == "json-runner"
        assert {"time", "level", "logger", "message"} <= set(record)
    finished = {r["run_id"]: r for r in about_runs if r["event"] in {"run.completed", "run.failed"}}
    assert finished[str(ok.id)]["level"] == "INFO", "a normal run is not a warning"
    assert finished[str(bad.id)]["level"] == "WARNING"


def test_liveness_fails_when_the_claim_loop_is_wedged(monkeypatch):
    """/healthz is 200 while the loop ticks, 503 once it is wedged, 200 again after."""
    wedged, release = threading.Event(), threading.Event()
    real = loop.next_due

    def maybe_stuck(carrying=None):
        if wedged.is_set():
            release.wait(60)
        return real(carrying)

    # The idle worker's one statement per poll.
    monkeypatch.setattr(loop, "next_due", maybe_stuck)
    port = free_port()
    with worker_on_thread(
        name="wedgeable", metrics_port=port, metrics_bind="127.0.0.1", liveness_timeout=0.5
    ):
        # Released before the block ends: a wedged loop would not hear the stop.
        try:
            assert http_get(port, "/healthz")[0] == 200
            wedged.set()
            for _ in range(200):
                if http_get(port, "/healthz")[0] == 503:
                    break
                threading.Event().wait(0.05)
            status, body = http_get(port, "/healthz")
            assert status == 503 and json.loads(body)["ok"] is False
            wedged.clear()
            release.set()
            for _ in range(200):
                if http_get(port, "/healthz")[0] == 200:
                    break
                threading.Event().wait(0.05)
            assert http_get(port, "/healthz")[0] == 200
        finally:
            release.set()
