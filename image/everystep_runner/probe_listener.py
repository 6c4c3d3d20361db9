"""The probe listener of the ``ui`` role (ui.py): ``/healthz``, ``/livez`` and ``/readyz``
answered from one thread that waits on every socket with a selector, whatever the clients
do. It keeps at most ``MAX_CLIENTS`` connections (the oldest is dropped first, so a flood
on the port cannot shut the next probe out) and closes any whose request is not whole
after ``CLIENT_TIMEOUT`` seconds. ``healthy()``, given by the caller, decides the answer.
Gunicorn's arbiter forks workers while it runs: the thread is stopped before each fork and
started again after it in the arbiter, and a worker closes every socket of the listener it
inherited.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable

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
