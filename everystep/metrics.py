"""Prometheus metrics: the one module that owns them.

Counters and histograms are fed by the lifecycle signals; the queue gauges are computed
on every scrape (a custom collector), so they are fresh no matter who scrapes. A worker's
own gauges are its collector's (``everystep.worker.collector``). Optional: without
prometheus-client installed, ``available()`` is False and nothing here is registered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, connections
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden

from everystep import signals

logger = logging.getLogger("everystep.metrics")

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - exercised by the "metrics off" path
    prometheus_client = None  # type: ignore[assignment]

_lock = threading.Lock()
_installed: dict[str, Any] = {}


def available() -> bool:
    """Whether prometheus-client is installed."""
    return prometheus_client is not None


def install() -> None:
    """Create the metrics and subscribe them to the lifecycle signals (idempotent)."""
    if prometheus_client is None:
        return
    with _lock:
        if _installed:
            return
        pc = prometheus_client
        _installed.update(
            runs=pc.Counter(
                "everystep_workflow_runs", "Runs that reached an outcome.", ["workflow", "status"]
            ),
            run_seconds=pc.Histogram(
                "everystep_workflow_duration_seconds",
                "Duration of the pass that reached the outcome.",
                ["workflow", "status"],
            ),
            steps=pc.Counter(
                "everystep_step_runs",
                "Steps executed and recorded.",
                ["workflow", "step", "status"],
            ),
            step_seconds=pc.Histogram(
                "everystep_step_duration_seconds",
                "Duration of executed steps.",
                ["workflow", "step"],
            ),
            claims=pc.Counter("everystep_worker_claims", "Runs claimed by a worker.", ["runner"]),
            requeued=pc.Counter("everystep_worker_requeued", "Runs a worker requeued.", ["runner"]),
            lateness=pc.Histogram(
                "everystep_wake_lateness_seconds",
                "How late a sleeping or waiting run resumed: actual minus intended wake time.",
                ["workflow"],
                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            ),
        )
        pc.REGISTRY.register(QueueCollector())
    signals.run_finished.subscribe(_on_run_finished)
    signals.step_recorded.subscribe(_on_step_recorded)
    signals.runs_claimed.subscribe(_on_runs_claimed)
    signals.run_requeued.subscribe(_on_run_requeued)
    signals.run_woken.subscribe(_on_run_woken)


_children: dict[tuple[str, ...], Any] = {}


def _child(metric: str, *labels: str) -> Any:
    """``metric``'s child for ``labels``. prometheus-client's ``labels()`` checks and
    locks on every call, several times per step of a busy worker; the children it
    returns are kept for good (nothing here removes one), so they are kept here too."""
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:  # two threads may both ask: labels() gives both the same child
        child = _children[key] = _installed[metric].labels(*labels)
    return child


def _on_run_finished(kw: dict[str, Any]) -> None:
    _child("runs", kw["workflow"], kw["status"]).inc()
    _child("run_seconds", kw["workflow"], kw["status"]).observe(kw["duration"])


def _on_step_recorded(kw: dict[str, Any]) -> None:
    if kw["status"] == "started":  # the start of an unsafe step is not an execution
        return
    _child("steps", kw["workflow"], kw["step"], kw["status"]).inc()
    _child("step_seconds", kw["workflow"], kw["step"]).observe(kw["duration"])


def _on_runs_claimed(kw: dict[str, Any]) -> None:
    _child("claims", kw["runner"]).inc(kw["count"])


def _on_run_requeued(kw: dict[str, Any]) -> None:
    _child("requeued", kw["runner"]).inc()


def _on_run_woken(kw: dict[str, Any]) -> None:
    _child("lateness", kw["workflow"]).observe(kw["lateness"])


_QUEUE_GAUGES = (
    ("everystep_workflows_pending", "pending", "Runs due and not yet claimed."),
    (
        "everystep_workflows_waiting",
        "waiting",
        # A parent awaiting its children (result, gather) is one of these too: it is
        # scheduled and not due, like a run waiting for an event (store.waiting_count).
        "Runs sleeping, waiting for an event or for other runs, or scheduled to start later.",
    ),
    ("everystep_workflows_running", "running", "Runs claimed by a worker."),
    (
        "everystep_workflows_blocked",
        "blocked",
        "Runs waiting for a human to settle an uncertain step.",
    ),
    (
        "everystep_workflows_oldest_pending_age_seconds",
        "oldest_pending_age",
        "How long the longest-due unclaimed run has been due (0 when none).",
    ),
)


class QueueCollector(Collector if prometheus_client else object):  # type: ignore[misc]
    """Queue gauges, read from the database at scrape time."""

    def describe(self) -> Iterator[Any]:
        # Lets the registry learn the names without querying the database (registration
        # happens in AppConfig.ready(), before the database may be used).
        for name, _, doc in _QUEUE_GAUGES:
            yield GaugeMetricFamily(name, doc)

    def collect(self) -> Iterator[Any]:
        from everystep import store

        try:
            stats = store.queue_stats()
        except DatabaseError as exc:
            logger.warning(
                "queue metrics unavailable: %s", exc, extra={"event": "metrics.queue_unavailable"}
            )
            return
        finally:
            # Scrapes run on the metrics server's threads: never keep a connection there.
            connections.close_all()
        for name, key, doc in _QUEUE_GAUGES:
            yield GaugeMetricFamily(name, doc, value=stats[key])


def exposition() -> tuple[bytes, str]:
    """The current metrics in the Prometheus text format, and its content type."""
    assert prometheus_client is not None
    return prometheus_client.generate_latest(), prometheus_client.CONTENT_TYPE_LATEST


def metrics_view(request: HttpRequest) -> HttpResponse:
    """A Django view serving the metrics, for a host project to mount in its urls. Who
    it answers is ``EVERYSTEP_METRICS_VIEW``: by default a logged-in user holding
    ``everystep.view_workflow`` (the metrics tell how busy the workers are and name the
    workflows and steps), else 403; "public" answers anyone, "off" answers 404."""
    from everystep import conf

    mode = conf.metrics_view_mode()
    if mode == "off":
        raise Http404("metrics are off here (EVERYSTEP_METRICS_VIEW = 'off')")
    user = getattr(request, "user", None)  # None without AuthenticationMiddleware
    if mode == "permission" and not (user and user.has_perm("everystep.view_workflow")):
        return HttpResponseForbidden(
            "403 Forbidden: the metrics need a login with the everystep.view_workflow "
            "permission (or EVERYSTEP_METRICS_VIEW = 'public'; scrape the workers' own "
            "port instead)\n",
            content_type="text/plain; charset=utf-8",
        )
    if prometheus_client is None:
        return HttpResponse(
            "prometheus-client is not installed: pip install 'everystep[metrics]'\n",
            status=503,
            content_type="text/plain",
        )
    install()
    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)
