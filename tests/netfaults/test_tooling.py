"""The fault-injection tooling itself (issue 37): the proxy's delay, jitter, resets and
switch against the real databases and raw sockets, and the namespace's blackhole, its end
with old flows kept dropped, and the proxy's client timeout, seen from processes inside
the namespace. Runs as root (``ip netns``, iptables inside the namespace)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import MySQLdb
import psycopg
import pytest

from tests.netfaults.netns import Namespace, namespace
from tests.netfaults.proxy import Proxy

POSTGRES = ("127.0.0.1", 5432)
MARIADB = ("127.0.0.1", 3306)
ROOT = Path(__file__).resolve().parents[2]
# Both host servers, whatever the session's: no test that stops one runs beside these
# (tests/exclusive.py).
pytestmark = pytest.mark.servers("postgres", "mariadb")


def pg(address: tuple[str, int]) -> psycopg.Connection:
    host, port = address
    return psycopg.connect(
        f"host={host} port={port} user=postgres dbname=postgres connect_timeout=5",
        autocommit=True,
    )


def round_trip(conn: psycopg.Connection) -> float:
    began = time.monotonic()
    assert conn.execute("SELECT 1").fetchone() == (1,)
    return time.monotonic() - began


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check()`` held."""
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout, f"no {what} within {timeout}s"
        time.sleep(0.1)
    return time.monotonic() - began


# -- an upstream of our own, for what the databases cannot show ---------------------------


class Echo(socketserver.ThreadingTCPServer):
    """Sends ``tag`` to each new connection, then echoes; keeps what it received and how
    each connection ended."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tag: bytes = b"") -> None:
        self.tag = tag
        self.received: list[bytes] = []
        self.errors: list[OSError] = []
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.server_address[1]

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _EchoHandler(socketserver.BaseRequestHandler):
    server: Echo

    def handle(self) -> None:
        try:
            self.request.sendall(self.server.tag)
            while data := self.request.recv(65536):
                self.server.received.append(data)
                self.request.sendall(data)
        except OSError as exc:
            self.server.errors.append(exc)


def client(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# -- the proxy ------------------------------------------------------------------------


def test_forwards_postgresql_and_mariadb_queries_over_50_connections_at_once() -> None:
    with Proxy(POSTGRES) as pg_proxy, Proxy(MARIADB) as my_proxy:
        conns = [pg(pg_proxy.address) for _ in range(50)]
        assert pg_proxy.stats["active"] == 50
        began = time.monotonic()

        def queries(conn: psycopg.Connection) -> int:
            for n in range(100):
                assert conn.execute("SELECT %s::int + 1", [n]).fetchone() == (n + 1,)
            return 100

        with ThreadPoolExecutor(50) as pool:  # a failed query fails the test through map
            assert sum(pool.map(queries, conns)) == 5000
        rate = 5000 / (time.monotonic() - began)
        for conn in conns:
            conn.close()
        print(f"\n5,000 queries over 50 connections through the proxy: {rate:.0f}/s")
        assert rate > 500
        wait_until(lambda: pg_proxy.stats["active"] == 0, 5, "connection closed")

        db = MySQLdb.connect(host="127.0.0.1", port=my_proxy.port, user="root")
        cursor = db.cursor()
        cursor.execute("SELECT 40 + 2")
        assert cursor.fetchone() == (42,)
        db.close()
        assert my_proxy.stats["accepted"] == 1


def test_delay_applies_to_open_connections_each_way() -> None:
    with Proxy(POSTGRES) as proxy, pg(proxy.address) as conn:
        assert round_trip(conn) < 0.1
        proxy.set_faults(delay=0.1)
        assert 0.2 <= round_trip(conn) < 0.6
        proxy.set_faults(delay=0.0)
        assert round_trip(conn) < 0.1


def test_jitter_keeps_the_order_of_a_connection_each_way() -> None:
    """300 numbered writes, each its own chunk, each held 0 to 30 ms: if a chunk could
    overtake an earlier one, both the upstream's copy and the echo would be out of order."""
    with Echo() as echo, Proxy(echo.address) as proxy, client(proxy.address) as sock:
        proxy.set_faults(jitter=0.03)
        sent = b""
        for n in range(300):
            line = f"{n}\n".encode()
            sock.sendall(line)
            sent += line
            time.sleep(0.002)
        echoed = b""
        while len(echoed) < len(sent):
            echoed += sock.recv(65536)
        assert b"".join(echo.received) == sent
        assert echoed == sent
        assert len(echo.received) > 100  # chunks apart, not one coalesced write


def test_reset_rate_1_resets_both_sides_instead_of_closing() -> None:
    with Echo(b"hello") as echo, Proxy(echo.address) as proxy, client(proxy.address) as sock:
        assert sock.recv(5) == b"hello"
        proxy.set_faults(reset_rate=1.0)
        sock.sendall(b"anything")
        with pytest.raises(ConnectionResetError):  # a clean close would read b""
            sock.recv(10)
        wait_until(lambda: bool(echo.errors), 5, "reset upstream")
        assert isinstance(echo.errors[0], ConnectionResetError)
        assert proxy.stats["resets"] == 1
    with Proxy(MARIADB) as proxy:
        proxy.set_faults(reset_rate=1.0)  # the server's greeting is the first chunk
        for _ in range(3):  # 1 in ~300 the reset beats the client's own connect check
            with pytest.raises(MySQLdb.OperationalError) as failed:
                MySQLdb.connect(host="127.0.0.1", port=proxy.port, user="root")
            if "Can't connect" not in str(failed.value):
                break
        assert "system error: 104" in str(failed.value)  # ECONNRESET


def test_switch_sends_new_connections_on_and_reset_all_ends_the_old_ones() -> None:
    with Echo(b"A") as a, Echo(b"B") as b, Proxy(a.address) as proxy:
        old = client(proxy.address)
        assert old.recv(1) == b"A"
        proxy.switch(b.address)
        new = client(proxy.address)
        assert new.recv(1) == b"B"
        old.sendall(b"x")
        assert old.recv(1) == b"x"  # an open connection stays where it was
        assert proxy.reset_all() == 2
        for sock in (old, new):
            with pytest.raises(ConnectionResetError):
                sock.recv(1)
            sock.close()
        with client(proxy.address) as after:
            assert after.recv(1) == b"B"
        assert proxy.stats["resets"] == 2


def test_runs_as_a_script_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.netfaults.proxy", "--listen", "127.0.0.1:0",
         "--upstream", "127.0.0.1:5432", "--delay", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with pg(("127.0.0.1", port)) as conn:
            assert round_trip(conn) >= 0.1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()


# -- the namespace --------------------------------------------------------------------


def ns_ip_links() -> tuple[str, str]:
    return (
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout,
        subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout,
    )


def test_namespaces_are_apart_and_leave_nothing_behind() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    # What a process killed before its cleanup leaves: the next create() deletes it.
    leftover = f"esnf-{dead.pid}-1"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    with pytest.raises(RuntimeError), namespace() as one, namespace() as two:
        assert one.name != two.name
        assert len({one.host_ip, one.ns_ip, two.host_ip, two.ns_ip}) == 4
        names, links = ns_ip_links()
        assert one.name in names and two.name in names and leftover not in names
        assert one.host_veth in links and two.host_veth in links
        inside = subprocess.run(one.command(["ip", "-br", "addr"]), capture_output=True, text=True)
        assert one.ns_ip in inside.stdout
        raise RuntimeError("a failing test")
    names, links = ns_ip_links()
    assert one.name not in names and two.name not in names
    assert one.host_veth not in links and two.host_veth not in links
    one.destroy()  # again: nothing to do, no error


SESSION = r"""
import os, socket, sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
port = socket.socket(fileno=os.dup(conn.pgconn.socket)).getsockname()[1]
print("ready", port, flush=True)
for line in sys.stdin:
    cursor = conn.execute(line)
    print(cursor.fetchone()[0] if cursor.description else "ok", flush=True)
"""

DATAGRAMS = r"""
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], 0))
sock.settimeout(0.1)
print(sock.getsockname()[1], flush=True)
got, sent, until = False, False, time.monotonic() + 2.5
while time.monotonic() < until and not (got and sent):
    try:
        sock.sendto(b"out", (sys.argv[2], int(sys.argv[3])))
        sent = True
    except OSError:
        pass  # EPERM from a DROP in OUTPUT
    try:
        got = got or sock.recv(100) == b"in"
    except TimeoutError:
        pass
print("got" if got else "nothing", flush=True)
"""

CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


class Session:
    """A psycopg connection held by a process inside the namespace, which runs each
    statement it is sent and prints the first column."""

    def __init__(self, ns: Namespace, proxy: Proxy, name: str = "esnf-tooling") -> None:
        dsn = f"host={ns.host_ip} port={proxy.port} user=postgres dbname=postgres "
        dsn += f"application_name={name} connect_timeout=5"
        self.proc = subprocess.Popen(
            ns.command([sys.executable, "-c", SESSION, dsn]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.answer(10)
        assert ready and ready.startswith("ready"), ready
        self.port = int(ready.split()[1])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def send(self, statement: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(statement + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def cut_off() -> Iterator[tuple[Namespace, Proxy, list[Session]]]:
    """A namespace, a proxy to PostgreSQL on its host side (a client timeout long enough
    not to interfere), and the sessions a test opens, closed after it."""
    sessions: list[Session] = []
    with namespace() as ns, Proxy(POSTGRES, listen=(ns.host_ip, 0)) as proxy:
        proxy.client_timeout = 60.0
        try:
            yield ns, proxy, sessions
        finally:
            for session in sessions:
                session.close()


def connect_from(ns: Namespace, proxy: Proxy) -> str:
    """What a new TCP connect from inside the namespace to the proxy gives (2 s at most)."""
    argv = [sys.executable, "-c", CONNECT, ns.host_ip, str(proxy.port)]
    return subprocess.run(ns.command(argv), capture_output=True, text=True, timeout=20).stdout


def datagrams(ns: Namespace) -> tuple[bool, bool]:
    """Whether datagrams get in to a process inside the namespace, and out from it to the
    host, over 2.5 s at most: each direction on its own (a DROP of replies alone would
    still time a TCP connect out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host:
        host.bind((ns.host_ip, 0))
        host.settimeout(0.1)
        argv = [sys.executable, "-c", DATAGRAMS, ns.ns_ip, ns.host_ip, str(host.getsockname()[1])]
        inside = subprocess.Popen(ns.command(argv), stdout=subprocess.PIPE, text=True)
        assert inside.stdout is not None
        port, out = int(inside.stdout.readline()), False
        while inside.poll() is None:
            host.sendto(b"in", (ns.ns_ip, port))
            with contextlib.suppress(TimeoutError):
                out = out or host.recv(100) == b"out"
        return inside.stdout.read().strip() == "got", out


def test_blackhole_drops_everything_both_ways_until_lifted(cut_off) -> None:
    ns, proxy, sessions = cut_off
    sessions.append(session := Session(ns, proxy))
    assert (session.port, ns.host_ip, proxy.port) in ns.flows()
    session.send("SELECT 1")
    assert session.answer(5) == "1"

    ns.blackhole()
    session.send("SELECT 2")
    assert datagrams(ns) == (False, False)
    assert session.answer(0.5) is None  # 3 s on, no answer and no error: silence
    assert session.proc.poll() is None
    assert connect_from(ns, proxy).strip() == "TimeoutError"  # not refused, not EPERM

    ns.lift()
    assert connect_from(ns, proxy).strip() == "connected"
    assert datagrams(ns) == (True, True)
    # The old flow is back too: the statement's retransmission gets through.
    assert session.answer(15) == "2"


def test_lift_keeping_old_flows_keeps_them_dead_and_lets_new_ones_through(cut_off) -> None:
    ns, proxy, sessions = cut_off
    sessions.append(old := Session(ns, proxy))
    ns.blackhole()
    assert ns.lift_keeping_old_flows() == [old.port]

    sessions.append(new := Session(ns, proxy))
    new.send("SELECT 3")
    assert new.answer(5) == "3"
    old.send("SELECT 4")
    assert old.answer(3) is None
    assert old.proc.poll() is None

    ns.lift()  # every rule it added, the kept flows' too
    assert old.answer(15) == "4"


def test_client_timeout_closes_the_upstream_of_a_blackholed_client(cut_off) -> None:
    """The server's session of a client cut off ends, and with it its transaction's locks,
    within about the client timeout."""
    ns, proxy, sessions = cut_off
    proxy.client_timeout = 3.0
    name = f"esnf-{uuid.uuid4().hex[:8]}"
    key = int.from_bytes(os.urandom(4), "big")
    sessions.append(session := Session(ns, proxy, name))
    for statement, answer in (("BEGIN", "ok"), (f"SELECT pg_advisory_xact_lock({key})", "")):
        session.send(statement)
        assert session.answer(5) == answer

    with pg(POSTGRES) as admin:

        def session_open() -> bool:
            found = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name]
            ).fetchone()
            return found == (1,)

        def lock_free() -> bool:
            row = admin.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
            return row == (True,)

        assert session_open() and not lock_free()
        assert proxy.stats["active"] == 1
        ns.blackhole()
        took = wait_until(lambda: not session_open(), 3.0 + 5, "session ended")
        print(f"\nblackholed client's upstream closed after {took:.1f}s (client_timeout 3s)")
        assert proxy.stats["active"] == 0
        assert lock_free()
