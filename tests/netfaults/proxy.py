"""A TCP proxy between workers and a database that adds delay, resets connections at
random, and switches upstream (a failover behind one address) (issue 37).

Delay, jitter and the reset rate are read for every chunk, so a change applies to the
connections already open. It cannot make a blackhole: as the peer of the client's TCP
connection it acknowledges every packet for a dead server (``netns`` does that, below
TCP). One asyncio loop on one background thread serves every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from typing import Any

from everystep.store.network import set_socket_timeouts


class _Link:
    """One proxied connection: the client's transport and the upstream's."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.closed = False

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]

    def reset(self) -> None:
        """RST both ways: a linger of 0 makes the close a reset, not a FIN."""
        self.closed = True
        for writer in self.writers():
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    def close(self) -> None:
        self.closed = True
        for writer in self.writers():
            writer.transport.close()


class Proxy:
    """Listens on ``listen`` and forwards each connection to ``upstream``."""

    def __init__(
        self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.upstream = upstream
        self.listen = listen
        self.delay = 0.0  # seconds added to every chunk, each way
        self.jitter = 0.0  # plus 0..jitter seconds at random; order is kept
        self.reset_rate = 0.0  # chance, per chunk, that its connection is reset
        # Keepalives and TCP_USER_TIMEOUT on the client-facing socket: a client cut off by
        # a blackhole is noticed within about this long and its upstream connection closed,
        # as a database server with tcp_keepalives set ends the session (and the row locks
        # of its open transaction). Without it the server would keep the dead client's
        # session for as long as the proxy lives.
        self.client_timeout = 10.0
        self.stats = {"accepted": 0, "resets": 0, "active": 0}
        self.port = 0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.listen[0], self.port

    def start(self) -> Proxy:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="netfault-proxy", daemon=True)
        self._thread.start()
        self._server = self._call(self._open())
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def set_faults(
        self,
        *,
        delay: float | None = None,
        jitter: float | None = None,
        reset_rate: float | None = None,
    ) -> None:
        # Plain attribute writes: each chunk reads them once, so any thread may set them.
        if delay is not None:
            self.delay = delay
        if jitter is not None:
            self.jitter = jitter
        if reset_rate is not None:
            self.reset_rate = reset_rate

    def switch(self, upstream: tuple[str, int]) -> None:
        """New connections go to ``upstream``; open ones stay where they are."""
        self.upstream = upstream

    def reset_all(self) -> int:
        """Reset every open connection; how many there were."""

        async def reset() -> int:
            links = list(self._links)
            for link in links:
                link.reset()
            self.stats["resets"] += len(links)
            return len(links)

        return self._call(reset())

    def __enter__(self) -> Proxy:
        return self.start() if self._loop is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- on the loop's thread ---------------------------------------------------------

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _open(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, *self.listen)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        await asyncio.sleep(0)

    async def _serve(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        self.stats["accepted"] += 1
        link = _Link(client)
        sock = client.get_extra_info("socket")
        if sock is not None and self.client_timeout > 0:
            set_socket_timeouts(sock.fileno(), self.client_timeout)
        try:
            upstream_in, link.upstream = await asyncio.open_connection(*self.upstream)
        except OSError:
            link.reset()  # as a server that is not there: the client sees a refusal
            return
        self._links.add(link)
        self.stats["active"] = len(self._links)
        try:
            await asyncio.gather(
                self._pump(client_in, link.upstream, link),
                self._pump(upstream_in, client, link),
            )
        finally:
            self._links.discard(link)
            self.stats["active"] = len(self._links)
            if not link.closed:
                link.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link
    ) -> None:
        """Forward ``source`` to ``sink`` until either side ends, each chunk no sooner than
        its delay, and never before an earlier chunk."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        pending = 0  # chunks queued and not written yet
        last_due = 0.0

        async def send() -> None:
            nonlocal pending
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                sink.write(data)
                await sink.drain()
                pending -= 1

        sender = asyncio.create_task(send())
        try:
            while not link.closed:
                data = await source.read(65536)
                if not data:
                    break
                if self.reset_rate and random.random() < self.reset_rate:
                    self.stats["resets"] += 1
                    link.reset()
                    break
                delay = self.delay + (random.uniform(0, self.jitter) if self.jitter else 0.0)
                if delay <= 0 and pending == 0:
                    sink.write(data)
                    await sink.drain()
                    continue
                last_due = max(loop.time() + delay, last_due)
                pending += 1
                queue.put_nowait((last_due, data))
            while pending and not link.closed and not sender.done():  # what is on its way
                await asyncio.sleep(0.005)
        except (ConnectionError, OSError):
            pass
        finally:
            sender.cancel()
            if not link.closed:
                link.close()  # one side ended: end the other
