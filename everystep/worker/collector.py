"""A worker's own gauges (pool size, runs in flight, start time), read from its live
state at every scrape of its probe port. The library's other metrics are in
``everystep.metrics``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from everystep.worker.worker_state import WorkerState


def worker_collector(worker: WorkerState) -> Any:
    """A prometheus-client collector of ``worker``'s gauges (prometheus-client installed)."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    class WorkerCollector(Collector):
        def collect(self) -> Iterator[Any]:
            runner = worker.options.name
            for name, value, doc in (
                ("everystep_worker_pool_size", worker.options.pool_size, "Max runs in flight."),
                ("everystep_worker_inflight", worker.inflight, "Runs in flight now."),
                (
                    "everystep_worker_started_at_seconds",
                    worker.started_at.timestamp(),
                    "Unix time the worker started.",
                ),
            ):
                family = GaugeMetricFamily(name, doc, labels=["runner"])
                family.add_metric([runner], value)
                yield family
            left = GaugeMetricFamily(
                "everystep_worker_runs_left_for_other_code",
                "Due runs this worker does not claim: their code is not its own.",
                labels=["runner", "workflow"],
            )
            for workflow, count in sorted(worker.left_for_other_code.items()):
                left.add_metric([runner, workflow], count)
            yield left

    return WorkerCollector()
