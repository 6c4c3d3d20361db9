"""The worker's HTTP port: ``/metrics``, ``/healthz`` (liveness), ``/readyz`` (readiness)."""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from everystep import metrics
from everystep.worker import health
from everystep.worker.collector import worker_collector
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A prober that gave up before the answer (a probe timeout shorter than a slow
        answer) is routine, not a traceback on stderr; anything else goes to the log."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            logger.debug("http: the client at %s hung up (%s)", client_address[0], exc)
            return
        logger.exception(
            "http: serving a request from %s failed",
            client_address[0],
            extra={"event": "worker.http_failed"},
        )


class ProbeServer:
    """A small threaded HTTP server bound to ``--metrics-bind:--metrics-port``."""

    def __init__(self, worker: WorkerState, sock: socket.socket | None = None) -> None:
        self.worker = worker
        options = worker.options
        self.readiness = health.Readiness()
        self.collector: Any = None
        if metrics.available():
            metrics.install()
            self.collector = worker_collector(worker)
            import prometheus_client

            prometheus_client.REGISTRY.register(self.collector)
        else:
            logger.warning(
                "prometheus-client is not installed: metrics are off on port %d (health "
                "endpoints still served); pip install 'everystep[metrics]'",
                options.metrics_port,
                extra={"event": "worker.metrics_off", "runner": options.name},
            )
        if sock is None:
            self.httpd = _Server((options.metrics_bind, options.metrics_port), self._handler())
        else:  # bound and listening already (a process of a group: its supervisor's)
            self.httpd = _Server(sock.getsockname(), self._handler(), bind_and_activate=False)
            self.httpd.socket.close()
            self.httpd.socket = sock
            self.httpd.server_address = sock.getsockname()
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="everystep-http", daemon=True
        )

    def start(self) -> None:
        self.thread.start()
        logger.info(
            "metrics and health on http://%s:%d",
            self.httpd.server_address[0],
            self.port,
            extra={"event": "worker.http_started", "runner": self.worker.options.name},
        )

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
        if self.collector is not None:
            import prometheus_client

            prometheus_client.REGISTRY.unregister(self.collector)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        worker, readiness = self.worker, self.readiness

        def probe(ready: bool) -> tuple[bool, dict[str, Any]]:
            answer = readiness(worker) if ready else health.liveness(worker)
            return answer.ok, answer.as_dict()

        return probe_handler(metrics.exposition, probe)


def probe_handler(
    exposition: Callable[[], tuple[bytes, str]],
    probe: Callable[[bool], tuple[bool, dict[str, Any]]],
    timeout: float | None = None,
) -> type[BaseHTTPRequestHandler]:
    """The routes of a probe port, a worker's or a group's (``merged``): ``/metrics``
    answers ``exposition()`` (body, content type); ``/healthz`` and ``/livez`` answer
    ``probe(False)``, ``/readyz`` ``probe(True)`` (ok, JSON body), 503 when not ok.
    ``timeout``: seconds a connection may stay silent (None: no limit)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                if not metrics.available():
                    self._send(
                        503, b"metrics are off: prometheus-client is not installed\n", "text/plain"
                    )
                    return
                self._send(200, *exposition())
            elif path in ("/healthz", "/livez", "/readyz"):
                ok, answer = probe(path == "/readyz")
                body = json.dumps(answer).encode() + b"\n"
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("http " + format, *args)

    Handler.timeout = timeout
    return Handler
