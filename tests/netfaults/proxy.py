"""A TCP proxy between workers and a database that adds delay, resets connections at
random, and switches upstream (a failover behind one address) (issue 37).

Delay, jitter and the reset rate are read for every chunk, so a change applies to the
connections already open. It cannot make a blackhole: as the peer of the client's TCP
connection it acknowledges every packet for a dead server (``netns`` does that, below
TCP). One asyncio loop on one background thread serves every connection, with protocol
callbacks rather than streams: a chunk with no fault on is written on in the callback that
received it, with no task switch, so the proxy's own cost stays small beside a database
round trip.

Also a script, for the benchmarks: ``python -m tests.netfaults.proxy --listen HOST:PORT
--upstream HOST:PORT [--delay S] [--jitter S] [--reset-rate P]`` prints its port and runs
until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import socket
import struct
import threading
from collections import deque
from typing import Any

from everystep.store.network import set_socket_timeouts


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: what it receives goes to the other side."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.ended = False  # its peer sent a FIN
        self.queue: deque[tuple[float, bytes]] = deque()  # delayed chunks from it, by due
        self.last_due = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self is self.link.client:
            self.link.proxy._accepted(self.link)

    def data_received(self, data: bytes) -> None:
        self.link.forward(self, data)

    def eof_received(self) -> bool:
        self.ended = True
        self.link.end_if_sent(self)
        return True  # the link closes the transport once the chunks before the FIN are sent

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.lost()

    # Backpressure: a side that cannot write as fast as the other reads slows the reader.
    def pause_writing(self) -> None:
        other = self.link.other(self).transport
        if other is not None:
            other.pause_reading()

    def resume_writing(self) -> None:
        other = self.link.other(self).transport
        if other is not None:
            other.resume_reading()


class _Link:
    """One proxied connection: the client's side and the upstream's."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.client = _Side(self)
        self.upstream = _Side(self)
        self.closed = False
        self.connecting: asyncio.Task[Any] | None = None

    def other(self, side: _Side) -> _Side:
        return self.upstream if side is self.client else self.client

    def forward(self, side: _Side, data: bytes) -> None:
        """Pass a chunk on, now or after its delay, never before an earlier one."""
        proxy, target = self.proxy, self.other(side).transport
        if self.closed or target is None:
            return
        if proxy.reset_rate and random.random() < proxy.reset_rate:
            proxy.stats["resets"] += 1
            self.reset()
            return
        delay = proxy.delay + (random.uniform(0, proxy.jitter) if proxy.jitter else 0.0)
        if delay <= 0 and not side.queue:  # no fault: straight through
            target.write(data)
            return
        loop = asyncio.get_running_loop()
        side.last_due = max(loop.time() + delay, side.last_due)
        side.queue.append((side.last_due, data))
        if side.timer is None:
            side.timer = loop.call_at(side.last_due, self._deliver, side)

    def _deliver(self, side: _Side) -> None:
        """Write the chunks from ``side`` that are due, in order; wait for the next. (One
        timer a direction, not one a chunk: timers due at the same moment may fire in any
        order.)"""
        loop, target = asyncio.get_running_loop(), self.other(side).transport
        side.timer = None
        while side.queue and side.queue[0][0] <= loop.time() and target is not None:
            target.write(side.queue.popleft()[1])
        if side.queue:
            side.timer = loop.call_at(side.queue[0][0], self._deliver, side)
        self.end_if_sent(side)

    def end_if_sent(self, side: _Side) -> None:
        """After a FIN from ``side`` and what came before it: FIN both ways."""
        if side.ended and not side.queue:
            self.close()

    def lost(self) -> None:
        """A socket closed (here, by a reset, or by the client timeout): the other goes
        too."""
        self.close()

    def reset(self) -> None:
        """RST both ways: a linger of 0 makes the close a reset, not a FIN."""
        self._end()
        for side in (self.client, self.upstream):
            if side.transport is None:
                continue
            sock = side.transport.get_extra_info("socket")
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            side.transport.abort()

    def close(self) -> None:
        """FIN both ways, after what is already written."""
        if self.closed:
            return
        self._end()
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.close()

    def _end(self) -> None:
        """No more forwarding, nothing left to send; no longer counted as active."""
        self.closed = True
        self.proxy._gone(self)
        if self.connecting is not None:
            self.connecting.cancel()
        for side in (self.client, self.upstream):
            if side.timer is not None:
                side.timer.cancel()
                side.timer = None
            side.queue.clear()


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
        # session, and its locks, for as long as the proxy lives: no real server does.
        # Read when a connection is accepted; 0 turns it off.
        self.client_timeout = 10.0
        # Written on the loop's thread only; any thread may read them.
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
        """Close the listening socket and every connection (a FIN each way), and end the
        loop's thread; idempotent."""
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
        """Reset every open connection (those still connecting upstream too); how many
        there were."""

        async def reset() -> int:
            links = [link for link in self._links if not link.closed]
            for link in links:
                link.reset()
            self.stats["resets"] += len(links)
            return len(links)

        return int(self._call(reset()))

    def __enter__(self) -> Proxy:
        return self.start() if self._loop is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- on the loop's thread ---------------------------------------------------------

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _open(self) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Link(self).client, *self.listen)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        await asyncio.sleep(0.05)  # the transports close their sockets on the next turns

    def _accepted(self, link: _Link) -> None:
        """A new client: its timeouts, then a connection to the upstream of the moment.
        The client is not read until that is open."""
        self.stats["accepted"] += 1
        self._links.add(link)
        self.stats["active"] = len(self._links)
        transport = link.client.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        if sock is not None and self.client_timeout > 0:
            set_socket_timeouts(sock.fileno(), self.client_timeout)
        transport.pause_reading()
        link.connecting = asyncio.get_running_loop().create_task(self._connect(link))

    async def _connect(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: link.upstream, *self.upstream)
        except OSError:
            link.reset()  # as a server that is not there: the client sees a refusal
            return
        finally:
            link.connecting = None
        if link.closed:  # reset or closed while connecting
            link.reset()
        else:
            assert link.client.transport is not None
            link.client.transport.resume_reading()

    def _gone(self, link: _Link) -> None:
        self._links.discard(link)
        self.stats["active"] = len(self._links)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.netfaults.proxy")
    parser.add_argument("--listen", type=_host_port, default=("127.0.0.1", 0))
    parser.add_argument("--upstream", type=_host_port, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--reset-rate", type=float, default=0.0)
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    with Proxy(args.upstream, args.listen) as proxy:
        proxy.set_faults(delay=args.delay, jitter=args.jitter, reset_rate=args.reset_rate)
        print(proxy.port, flush=True)
        while not stopping.wait(1):
            pass


if __name__ == "__main__":
    main()
