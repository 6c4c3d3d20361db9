"""The ``ui`` role: gunicorn serving the everystep UI from the user's project, and the
role's probes answered by gunicorn's arbiter on the runner's probe port.

The probes: ``/healthz`` (also ``/livez``) and ``/readyz`` on ``metrics_bind:metrics_port``,
not on the UI's port. Gunicorn's threaded workers give a thread to every connection that
has sent a byte, until its request is whole: as many clients holding half-sent requests as
the UI has threads (2 workers x 8 by default) left the UI's own ``/healthz`` unanswered,
and an orchestrator would then restart a UI that is only busy. The probe listener holds no
thread per connection: one thread waits on every socket with a selector, keeps at most
``MAX_CLIENTS`` of them (the oldest is dropped first, so a flood on that port cannot shut
the next probe out) and closes any whose request is not whole after ``CLIENT_TIMEOUT``
seconds. Its answer is gunicorn's own view of its workers: healthy while at least one
worker's heartbeat is fresh (the rule by which the arbiter kills a stuck worker). The
arbiter forks workers while it runs: the thread is stopped before each fork and started
again after it in the arbiter, and a worker closes every socket of the listener it
inherited.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from everystep_runner import project
from everystep_runner.settings import RunnerSettings, probe_address

# Threads per gunicorn worker. A gthread worker waits for a connection's first bytes
# without a thread, but then holds one until the request is whole: workers * THREADS
# clients holding half-sent requests stall every page. The probes do not depend on them
# (below); a public UI belongs behind a buffering proxy (docs/security.md).
THREADS = 8


class UIServer(BaseApplication):
    """Gunicorn with its configuration taken from the runner settings, no config file.

    ``probes``, a listening socket, gets the UI's probes answered by the arbiter."""

    def __init__(self, settings: RunnerSettings, probes: socket.socket | None = None) -> None:
        self.settings = settings
        self.options = {
            "bind": settings.ui_bind,
            "workers": settings.ui_workers,
            "worker_class": "gthread",
            "threads": THREADS,
            "timeout": settings.ui_timeout,
            "graceful_timeout": settings.ui_timeout,
            "accesslog": "-",
            "errorlog": "-",
            "loglevel": settings.log_level.lower(),
            "logger_class": runner_logger(project.formatter(settings)),
            "proc_name": "everystep-ui",
            # Heartbeat files on a tmpfs: a container's overlay filesystem can stall them.
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
            # Gunicorn 25.1+ opens a control socket under $HOME (a read-only path in the
            # hardened image) that can resize or stop the UI: the runner has no use for it.
            "control_socket_disable": True,
        }
        if probes is not None:
            self.options |= _probe_hooks(probes)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings:  # a setting of a newer gunicorn than this one
                self.cfg.set(key, value)

    def load(self) -> Any:
        from django.conf import settings as django_settings
        from django.core.handlers.wsgi import WSGIHandler

        django_settings.ROOT_URLCONF = "everystep_runner.urls"
        # Django was set up before the fork, with the runner's log settings applied after
        # the project's LOGGING. get_wsgi_application() would set it up again in each
        # worker and put the project's LOGGING back over them.
        return WSGIHandler()


def runner_logger(formatter: logging.Formatter) -> type[Logger]:
    """Gunicorn's logger class, writing its error and access lines in the runner's format."""

    class RunnerLogger(Logger):
        def setup(self, cfg: Any) -> None:
            super().setup(cfg)
            for log in (self.error_log, self.access_log):
                for handler in log.handlers:
                    if getattr(handler, "_gunicorn", False):  # gunicorn's own, not a project's
                        handler.setFormatter(formatter)

    return RunnerLogger


def live_workers(arbiter: Any) -> int:
    """How many of the arbiter's workers have a fresh heartbeat, by its own rule
    (``Arbiter.murder_workers``); read from the probes' thread."""
    now, live = time.monotonic(), 0
    for worker in list(arbiter.WORKERS.values()):
        try:
            live += now - worker.tmp.last_update() <= arbiter.timeout
        except (OSError, ValueError):  # its heartbeat file closed: being reaped
            continue
    return live


def _probe_hooks(sock: socket.socket) -> dict[str, Any]:
    listener: list[ProbeListener] = []

    def when_ready(arbiter: Any) -> None:
        listener.append(ProbeListener(sock, lambda: live_workers(arbiter) > 0))
        listener[0].start()
        arbiter.log.info("UI probes on http://%s:%d/healthz", *sock.getsockname()[:2])

    def on_exit(arbiter: Any) -> None:
        for each in listener:
            each.stop()

    return {"when_ready": when_ready, "on_exit": on_exit}


def probe_socket(settings: RunnerSettings) -> socket.socket | None:
    """The probes' listening socket on the runner's probe address, or None when off."""
    address = probe_address(settings)
    return None if address is None else listen(*address)


def serve(settings: RunnerSettings) -> int:
    try:
        probes = probe_socket(settings)
    except OSError as exc:
        print(f"everystep-runner: cannot listen for the UI's probes: {exc}", file=sys.stderr)
        return 1
    UIServer(settings, probes).run()
    return 0


# --- the probe listener ---------------------------------------------------------------

# Paths answered with the health check; the worker's probe port answers the same names.
PROBE_PATHS = ("/healthz", "/livez", "/readyz")
MAX_CLIENTS = 64
CLIENT_TIMEOUT = 5.0
MAX_HEAD = 8192  # bytes of request line and headers read before giving up on a client
_TICK = 0.5  # seconds between sweeps of clients past their deadline


def listen(host: str, port: int) -> socket.socket:
    """A listening socket for the probes; ``OSError`` if the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=128)
    sock.setblocking(False)
    return sock


def answer(request_head: bytes, healthy: Callable[[], bool]) -> bytes:
    """The whole HTTP response to one request, from its request line."""
    line = request_head.split(b"\n", 1)[0].decode("latin-1").split()
    method, path = (line[0], line[1].split("?", 1)[0]) if len(line) == 3 else ("", "")
    if not method:
        status, body = "400 Bad Request", "bad request\n"
    elif path not in PROBE_PATHS:
        status, body = "404 Not Found", "not found: this port serves the UI's probes only\n"
    elif method not in ("GET", "HEAD"):
        status, body = "405 Method Not Allowed", "GET or HEAD\n"
    elif healthy():
        status, body = "200 OK", "ok\n"
    else:
        status, body = "503 Service Unavailable", "no UI worker with a fresh heartbeat\n"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return (head + ("" if method == "HEAD" else body)).encode("ascii")


class _Client:
    __slots__ = ("deadline", "head", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.head, self.deadline = sock, bytearray(), time.monotonic() + CLIENT_TIMEOUT


class ProbeListener:
    """Answers the probes on ``sock`` from a thread of its own; ``healthy()`` decides."""

    def __init__(self, sock: socket.socket, healthy: Callable[[], bool]) -> None:
        self.sock, self.healthy = sock, healthy
        self.clients: dict[socket.socket, _Client] = {}  # in arrival order
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread: threading.Thread | None = None
        self._running = False

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        if self._thread is None:
            _LISTENERS.add(self)
            self._running = True
            self._thread = threading.Thread(target=self._serve, name="everystep-ui-probes")
            self._thread.daemon = True
            self._thread.start()

    def pause(self) -> None:
        """Stop the thread; the sockets and the connections in progress stay."""
        if self._thread is not None:
            self._running = False
            self._wake_w.send(b"x")
            self._thread.join()
            self._thread = None

    def stop(self) -> None:
        self.pause()
        _LISTENERS.discard(self)
        self.close()

    def close(self) -> None:
        """Close every socket (a forked worker's copies; or at the end)."""
        for sock in (*self.clients, self.sock, self._wake_r, self._wake_w):
            sock.close()
        self.clients.clear()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            for sock in self.clients:
                selector.register(sock, selectors.EVENT_READ)
            while self._running:
                for key, _ in selector.select(_TICK):
                    if key.fileobj is self.sock:
                        self._accept(selector)
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    elif key.fileobj in self.clients:
                        self._read(selector, self.clients[key.fileobj])
                self._sweep(selector)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # a connection reset before it was accepted, out of files
                return
            sock.setblocking(False)
            if len(self.clients) >= MAX_CLIENTS:
                self._drop(selector, next(iter(self.clients.values())))
            self.clients[sock] = _Client(sock)
            selector.register(sock, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, client: _Client) -> None:
        try:
            chunk = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        client.head += chunk
        whole = b"\r\n\r\n" in client.head or b"\n\n" in client.head
        if chunk and whole:
            # A few hundred bytes into a fresh socket's empty buffer: one send is enough.
            with contextlib.suppress(OSError):
                client.sock.send(answer(bytes(client.head), self.healthy))
        if not chunk or whole or len(client.head) > MAX_HEAD:
            self._drop(selector, client)

    def _sweep(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for client in [c for c in self.clients.values() if c.deadline < now]:
            self._drop(selector, client)

    def _drop(self, selector: selectors.BaseSelector, client: _Client) -> None:
        selector.unregister(client.sock)
        del self.clients[client.sock]
        client.sock.close()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except (BlockingIOError, InterruptedError):
            pass


# The listeners of this process. A fork copies only the thread that forks: each thread
# is stopped first, so that none holds a lock the child would inherit held.
_LISTENERS: set[ProbeListener] = set()


def _before_fork() -> None:
    for listener in list(_LISTENERS):
        listener.pause()


def _after_fork_in_parent() -> None:
    for listener in list(_LISTENERS):
        listener.start()


def _after_fork_in_child() -> None:
    for listener in list(_LISTENERS):
        listener.close()
    _LISTENERS.clear()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
