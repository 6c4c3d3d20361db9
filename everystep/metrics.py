"""Prometheus metrics: the one module that owns them.

Counters and histograms are fed by the lifecycle signals and kept per thread
(``everystep.tallies``), summed at every scrape; the queue gauges are computed on every
scrape too (custom collectors), so they are fresh no matter who scrapes. A worker's
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
from everystep.tallies import Tallies

logger = logging.getLogger("everystep.metrics")

try:
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.registry import Collector
    from prometheus_client.utils import floatToGoString
except ImportError:  # pragma: no cover - exercised by the "metrics off" path
    prometheus_client = None  # type: ignore[assignment]

_lock = threading.Lock()
_installed: list[Tallies] = []  # the one Tallies, once install() has run

# prometheus-client's default buckets (without +Inf), and the lateness histogram's own.
_DURATION_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_LATENESS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# The counters: key → (name, help, label names); the histograms also their bucket bounds.
# Counters are exposed with the ``_total`` suffix, histograms with ``_bucket``, ``_count``
# and ``_sum``.
_COUNTERS = {
    "runs": ("everystep_workflow_runs", "Runs that reached an outcome.", ("workflow", "status")),
    "steps": (
        "everystep_step_runs",
        "Steps executed and recorded.",
        ("workflow", "step", "status"),
    ),
    "claims": ("everystep_worker_claims", "Runs claimed by a worker.", ("runner",)),
    "requeued": ("everystep_worker_requeued", "Runs a worker requeued.", ("runner",)),
}
_HISTOGRAMS = {
    "run_seconds": (
        "everystep_workflow_duration_seconds",
        "Duration of the pass that reached the outcome.",
        ("workflow", "status"),
        _DURATION_BOUNDS,
    ),
    "step_seconds": (
        "everystep_step_duration_seconds",
        "Duration of executed steps.",
        ("workflow", "step"),
        _DURATION_BOUNDS,
    ),
    "lateness": (
        "everystep_wake_lateness_seconds",
        "How late a sleeping or waiting run resumed: actual minus intended wake time.",
        ("workflow",),
        _LATENESS_BOUNDS,
    ),
}


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
        tallies = Tallies({metric: spec[3] for metric, spec in _HISTOGRAMS.items()})
        prometheus_client.REGISTRY.register(TallyCollector(tallies))
        prometheus_client.REGISTRY.register(QueueCollector())
        _installed.append(tallies)
    signals.run_finished.subscribe(_on_run_finished)
    signals.step_recorded.subscribe(_on_step_recorded)
    signals.runs_claimed.subscribe(_on_runs_claimed)
    signals.run_requeued.subscribe(_on_run_requeued)
    signals.run_woken.subscribe(_on_run_woken)


def _on_run_finished(kw: dict[str, Any]) -> None:
    tallies = _installed[0]
    tallies.add(("runs", kw["workflow"], kw["status"]))
    tallies.observe(("run_seconds", kw["workflow"], kw["status"]), kw["duration"])


def _on_step_recorded(kw: dict[str, Any]) -> None:
    if kw["status"] == "started":  # the start of an unsafe step is not an execution
        return
    tallies = _installed[0]
    tallies.add(("steps", kw["workflow"], kw["step"], kw["status"]))
    tallies.observe(("step_seconds", kw["workflow"], kw["step"]), kw["duration"])


def _on_runs_claimed(kw: dict[str, Any]) -> None:
    _installed[0].add(("claims", kw["runner"]), kw["count"])


def _on_run_requeued(kw: dict[str, Any]) -> None:
    _installed[0].add(("requeued", kw["runner"]))


def _on_run_woken(kw: dict[str, Any]) -> None:
    _installed[0].observe(("lateness", kw["workflow"]), kw["lateness"])


class TallyCollector(Collector if prometheus_client else object):  # type: ignore[misc]
    """The counters and histograms, summed from ``tallies`` at scrape time."""

    def __init__(self, tallies: Tallies) -> None:
        self.tallies = tallies

    def describe(self) -> Iterator[Any]:
        yield from self._families().values()

    def collect(self) -> Iterator[Any]:
        families = self._families()
        for key, value in sorted(self.tallies.read().items()):
            metric, labels = key[0], list(key[1:])
            family = families[metric]
            if metric in _COUNTERS:
                family.add_metric(labels, value)
                continue
            counts, total = value
            uppers = [*map(floatToGoString, self.tallies.bounds[metric]), "+Inf"]
            family.add_metric(labels, list(zip(uppers, counts, strict=True)), total)
        yield from families.values()

    @staticmethod
    def _families() -> dict[str, Any]:
        families: dict[str, Any] = {}
        for metric, (name, doc, labels) in _COUNTERS.items():
            families[metric] = CounterMetricFamily(name, doc, labels=labels)
        for metric, (name, doc, labels, _) in _HISTOGRAMS.items():
            families[metric] = HistogramMetricFamily(name, doc, labels=labels)
        return families


_QUEUE_GAUGES = (
    ("everystep_workflows_pending", "pending", "Runs due and not yet claimed."),
    (
        "everystep_workflows_waiting",
        "waiting",
        # A parent awaiting its children (result, gather) is one of these too: it is
        # scheduled and not due, like a run waiting for an event (waiting_count).
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
        from everystep.store.reports import queue_stats

        try:
            stats = queue_stats()
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


def _may_read(user: Any) -> bool:
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and user.has_perm("everystep.view_workflow")
    )


def metrics_view(request: HttpRequest) -> HttpResponse:
    """A Django view serving the metrics, for a host project to mount in its urls. Who
    it answers is ``EVERYSTEP_METRICS_VIEW``: by default whom the UI's pages answer, an
    active staff user holding ``everystep.view_workflow`` (the metrics tell how busy the
    workers are and name the workflows and steps), else 403; "public" answers anyone,
    "off" answers 404."""
    from everystep import conf

    mode = conf.metrics_view_mode()
    if mode == "off":
        raise Http404("metrics are off here (EVERYSTEP_METRICS_VIEW = 'off')")
    user = getattr(request, "user", None)  # None without AuthenticationMiddleware
    if mode == "permission" and not _may_read(user):
        return HttpResponseForbidden(
            "403 Forbidden: the metrics need a staff login with the everystep.view_workflow "
            "permission, as the UI's pages do (or EVERYSTEP_METRICS_VIEW = 'public'; scrape "
            "the workers' own port instead)\n",
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
