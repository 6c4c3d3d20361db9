"""Metrics and health endpoints of a real worker subprocess, scraped over HTTP."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from everystep import schedule
from everystep.models import Step, Workflow
from tests.acceptance.conftest import database_server, free_port, http_get, wait_until
from tests.testapp import workflows as wf
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]

WF = "tests.testapp.workflows."


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = http_get(port, "/metrics")
    assert status == 200, body
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_match_the_database(workers, blocked_run):
    """Counters, histograms and gauges scraped from a worker agree with the rows."""
    for i in range(3):
        schedule(wf.sequential, i, 1)
    for _ in range(2):
        schedule(wf.failing)
    schedule(wf.stop_from_step)
    schedule(wf.stop_from_body, 3)
    port = free_port()
    proc = workers(
        "observed",
        "--pool",
        "1",
        "--metrics-port",
        str(port),
        "--metrics-bind",
        "127.0.0.1",
        "--poll",
        "0.05",
    )
    wait_until(
        lambda: (
            Workflow.objects.filter(claimed_by="observed").exclude(status="running").count() == 7
        ),
        60,
        "the mixed runs to finish",
    )

    # Occupy the single slot, then queue two more: the gauges must show them.
    slow = schedule(wf.slow, 4)
    wait_until(
        lambda: Execution.objects.filter(run_id=slow.id, step="long").exists(),
        60,
        "the long step to start",
    )
    for i in range(2):
        schedule(wf.sequential, 10 + i, 1)
    samples = scrape(port)
    assert value(samples, "everystep_workflows_pending") == 2
    assert Workflow.objects.filter(status="scheduled").count() == 2
    assert value(samples, "everystep_workflows_running") == 1
    assert value(samples, "everystep_workflows_blocked") == 1
    assert value(samples, "everystep_workflows_oldest_pending_age_seconds") > 0
    assert value(samples, "everystep_worker_inflight", runner="observed") == 1

    wait_until(
        lambda: not Workflow.objects.filter(status__in=["scheduled", "running"]).exists(),
        60,
        "everything to finish",
    )

    def reaped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        # A run's outcome commits a moment before the loop reaps its pass.
        samples = scrape(port)
        return (
            samples if value(samples, "everystep_worker_inflight", runner="observed") == 0 else None
        )

    samples = wait_until(reaped, 30, "the last pass to be reaped")
    mine = Workflow.objects.filter(claimed_by="observed")
    outcomes = Counter(mine.values_list("name", "status"))
    for (name, status), count in outcomes.items():
        assert (
            value(samples, "everystep_workflow_runs_total", workflow=name, status=status) == count
        ), (name, status)
        assert (
            value(
                samples, "everystep_workflow_duration_seconds_count", workflow=name, status=status
            )
            == count
        )
    assert (
        sum(v for (n, _), v in samples.items() if n == "everystep_workflow_runs_total")
        == mine.count()
        == 10
    )
    steps = Counter(
        Step.objects.filter(workflow__in=mine).values_list("workflow__name", "name", "status")
    )
    for (workflow, step, status), count in steps.items():
        assert (
            value(samples, "everystep_step_runs_total", workflow=workflow, step=step, status=status)
            == count
        ), (workflow, step, status)
    assert sum(v for (n, _), v in samples.items() if n == "everystep_step_runs_total") == sum(
        steps.values()
    )
    durations = Counter(
        Step.objects.filter(workflow__in=mine).values_list("workflow__name", "name")
    )
    for (workflow, step), count in durations.items():
        assert (
            value(samples, "everystep_step_duration_seconds_count", workflow=workflow, step=step)
            == count
        )
    assert value(samples, "everystep_worker_claims_total", runner="observed") == 10
    assert value(samples, "everystep_worker_pool_size", runner="observed") == 1
    assert value(samples, "everystep_worker_inflight", runner="observed") == 0
    assert value(samples, "everystep_worker_started_at_seconds", runner="observed") > 0
    assert value(samples, "everystep_workflows_pending") == 0
    assert value(samples, "everystep_workflows_blocked") == 1
    # No run id ever becomes a label.
    assert not any(dict(labels).get("run_id") for _, labels in samples)
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_readiness_turns_unready_while_draining(workers):
    """Draining: readiness fails (503) while liveness holds, until the worker exits 0."""
    run = schedule(wf.slow, 4)
    port = free_port()
    proc = workers("prober", "--drain", "60", "--metrics-port", str(port), "--poll", "0.05")
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 60, "readiness")
    assert json.loads(http_get(port, "/readyz")[1])["migrations"] == "ok"
    wait_until(
        lambda: Execution.objects.filter(run_id=run.id, step="long").exists(),
        60,
        "the long step to start",
    )
    proc.signal(signal.SIGTERM)
    wait_until(lambda: http_get(port, "/readyz")[0] == 503, 30, "unready while draining")
    status, body = http_get(port, "/readyz")
    assert status == 503 and json.loads(body)["draining"] is True
    assert http_get(port, "/healthz")[0] == 200
    assert proc.wait(60) == 0


@pytest.mark.backends("postgres", "mariadb")
@pytest.mark.exclusive
def test_readiness_follows_the_database(workers):
    """Readiness is 503 while the database is down and 200 again once it is back."""
    port = free_port()
    proc = workers("db-watcher", "--metrics-port", str(port), "--poll", "0.1")
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 60, "readiness")
    database_server("stop")
    try:
        wait_until(lambda: http_get(port, "/readyz")[0] == 503, 60, "unready without database")
        assert "unreachable" in json.loads(http_get(port, "/readyz")[1])["database"]
        assert http_get(port, "/healthz")[0] == 200, "a database outage is not a wedged loop"
    finally:
        database_server("start")
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 120, "ready again")
    run = schedule(wf.sequential, 1, 2)
    wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 60, "a run")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_worker_without_prometheus_client_says_metrics_are_off(workers, tmp_path: Path):
    """Without prometheus-client the worker runs, serves health, and says metrics are off."""
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed (test shadow)')\n")
    port = free_port()
    proc = workers(
        "no-metrics", "--metrics-port", str(port), "--poll", "0.05", extra_path=str(shadow.parent)
    )
    wait_until(lambda: http_get(port, "/healthz")[0] == 200, 60, "liveness")
    assert http_get(port, "/metrics")[0] == 503
    assert "metrics are off" in proc.log()
    run = schedule(wf.sequential, 1, 2)
    wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 60, "a run")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
