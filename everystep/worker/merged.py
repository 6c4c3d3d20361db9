"""The one HTTP port of a group of worker processes (``processes``).

Each child serves its own ``/metrics``, ``/healthz`` and ``/readyz`` on a loopback socket
the supervisor bound for it; the supervisor serves ``--metrics-port`` and answers from
theirs, so a scraper and a pod's probes see one worker:

- ``/metrics``: the children's samples merged. A child's own gauges and counters are
  labelled with its name; they are labelled with the group's name and summed (the start
  time is the earliest). The gauges about the whole database (``everystep_workflows_*``),
  which every child reads alike, are taken once (the highest), not summed.
- ``/healthz`` and ``/readyz``: ok only while every child runs and answers ok; the body
  lists each child's answer. A child that was killed turns both red until the one that
  replaces it answers.

The supervisor serves the port on its main thread, one request at a time between its
looks at the children: it must run no thread when it forks (``processes``). A child's
answer is waited for ``ASK_TIMEOUT`` seconds at most.
"""

from __future__ import annotations

import json
import logging
import select
import urllib.error
import urllib.request
from http.server import HTTPServer
from typing import TYPE_CHECKING, Any

from everystep.worker.http import probe_handler

if TYPE_CHECKING:
    from everystep.worker.processes import Slot
    from everystep.worker.worker_state import WorkerOptions

logger = logging.getLogger("everystep.worker")

ASK_TIMEOUT = 2.0
# Samples taken at their earliest (a start or creation time) and at their highest (a
# figure every child reads alike: the database-wide gauges, the interpreter's version, a
# limit) instead of summed.
_EARLIEST = ("_created", "_start_time_seconds", "_started_at_seconds")
_SAME_IN_EVERY_CHILD = (
    "everystep_workflows_",
    "everystep_worker_runs_left_for_other_code",  # each child counts the same due runs
    "python_info",
    "process_max_fds",
)


class MergedPort:
    """The supervisor's port; ``serve(timeout)`` answers at most one request."""

    def __init__(self, options: WorkerOptions, slots: list[Slot]) -> None:
        self.options, self.slots = options, slots
        # A client that sends nothing must not hold the supervisor's loop.
        handler = probe_handler(self._exposition, self._probe, timeout=ASK_TIMEOUT)
        self.httpd = HTTPServer((options.metrics_bind, options.metrics_port), handler)
        logger.info(
            "metrics and health of every process on http://%s:%d",
            options.metrics_bind,
            self.httpd.server_address[1],
            extra={"event": "workers.http_started", "runner": options.name},
        )

    def serve(self, timeout: float) -> None:
        ready, _, _ = select.select([self.httpd.socket], [], [], timeout)
        if ready:
            self.httpd.handle_request()

    def close(self) -> None:
        self.httpd.server_close()

    # -- answers ----------------------------------------------------------------------

    def probe(self, path: str) -> tuple[bool, dict[str, Any]]:
        children = []
        for slot in self.slots:
            if slot.pid is None or slot.probe is None:
                children.append(
                    {"process": slot.index, "runner": slot.name, "ok": False, "why": "not running"}
                )
                continue
            status, body = _ask(slot, path)
            answer: dict[str, Any] = {"process": slot.index, "runner": slot.name, "pid": slot.pid}
            answer["ok"] = status == 200
            try:
                answer["answer"] = json.loads(body)
            except ValueError:
                answer["why"] = body.strip()[:200]
            children.append(answer)
        ok = all(child["ok"] for child in children)
        return ok, {"ok": ok, "runner": self.options.name, "processes": children}

    def metrics(self) -> bytes:
        texts = []
        for slot in self.slots:
            if slot.pid is not None and slot.probe is not None:
                status, body = _ask(slot, "/metrics")
                if status == 200:
                    texts.append(body)
        return merge(texts, self.options.name, {slot.name for slot in self.slots})

    def _exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST

        return self.metrics(), CONTENT_TYPE_LATEST

    def _probe(self, ready: bool) -> tuple[bool, dict[str, Any]]:
        return self.probe("/readyz" if ready else "/healthz")


def _ask(slot: Slot, path: str) -> tuple[int, str]:
    assert slot.probe is not None
    port = slot.probe.getsockname()[1]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=ASK_TIMEOUT) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, f"no answer: {exc}"


def merge(texts: list[str], group: str, children: set[str]) -> bytes:
    """The children's expositions ``texts`` as one: a ``runner`` label naming a child
    names ``group``, and samples alike are summed (but ``_EARLIEST`` and
    ``_SAME_IN_EVERY_CHILD``)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            samples = values.setdefault(family.name, {})
            for sample in family.samples:
                labels = dict(sample.labels)
                if labels.get("runner") in children:
                    labels["runner"] = group
                key = (sample.name, tuple(sorted(labels.items())))
                if key not in samples:
                    samples[key] = sample.value
                elif sample.name.endswith(_EARLIEST):
                    samples[key] = min(samples[key], sample.value)
                elif family.type == "gauge" and family.name.startswith(_SAME_IN_EVERY_CHILD):
                    samples[key] = max(samples[key], sample.value)
                else:
                    samples[key] += sample.value

    class Merged:
        def collect(self) -> Any:
            for name, family in families.items():
                for (sample_name, labels), value in values[name].items():
                    family.add_sample(sample_name, dict(labels), value)
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())
    return generate_latest(registry)
