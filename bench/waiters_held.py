"""What open waits hold in an ASGI server (issue 50, item 5): PostgreSQL connections
and threads of one uvicorn process while N requests wait in ``awatch`` and ``aresult``.

    .venv/bin/python bench/waiters_held.py [--db postgres] [--waiters 20 100 300]
        [--quick] [--hold 3] [--own-server] [--wait-quiet 60] [--source PATH]
        [--label NAME] [--results DIR] [--keep-logs]

On a fresh PostgreSQL database of its own (``everystep_test_bench_…``, dropped at the
end), for each N of ``--waiters`` (``--quick``: 5): N runs of ``bench_one`` are
scheduled and left unclaimed; one uvicorn process serves ``everystep_bench/waiting_asgi.py``
(the documented pattern: each view reads the ORM, then waits; the settings' middleware,
``CONN_MAX_AGE`` 0) and N requests open at once, one HTTP connection each: half SSE
streams of ``awatch``, half ``aresult`` views. Once every run is marked awaited (or
nothing has changed for 3 s: waits that failed), for ``--hold`` seconds the benchmark
samples the sessions on the benchmark database (``pg_stat_activity``, all but its own:
no worker runs meanwhile, so they are uvicorn's), the server's sessions in all, and the
uvicorn process's threads (``/proc/PID/status``). Then the benchmark process runs the
runs itself (``everystep.testing.run_due``: a worker might find no connection left) and
checks every answer: a stream must end with ``event: end`` and ``completed``, a result
must be the run's. Refused connections and server errors are counted, not raised.

``--own-server`` serves the phases from a PostgreSQL cluster of its own (``initdb`` in a
temporary directory, run as the ``postgres`` user, ``max_connections`` 100: the default),
so a tree that takes a connection per wait exhausts that server, not the machine's.

The result line (kind ``waiters_held``) goes to ``bench/results/waiters_held.jsonl``.
Exits 1 if a request of the tree measured failed. To measure the tree before the fix:
``git archive <commit> | tar -x -C /tmp/before`` and ``--source /tmp/before``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import async_io
from async_io import free_port
from harness import options, runs
from harness.cpu import wait_quiet
from harness.results import print_header, print_problems
from harness.session import ROOT, Session, run_benchmark

SETTINGS = "everystep_bench.waiting_asgi"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
SAMPLE_EVERY = 0.25
SETTLED = 3.0  # seconds without change: the waits that will be held are held
END = 'event: end\ndata: {"status": "completed"}'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("postgres",), default="postgres")
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("EVERYSTEP_BENCH_SOURCE", ROOT)),
        help="tree whose everystep/ and tests/ are measured (this repository)",
    )
    parser.add_argument("--label", default="current", help="names the result line (current)")
    options.add_results_argument(parser)
    parser.add_argument(
        "--waiters", type=int, nargs="+", default=[20, 100, 300], help="N (20 100 300)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: N = 5")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds sampled (3)")
    parser.add_argument(
        "--own-server", action="store_true", help="a PostgreSQL cluster of its own (root)"
    )
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.waiters = [5]
    if min(args.waiters) < 2 or args.hold < 0:
        parser.error("--waiters must be >= 2 and --hold not negative")
    return args


# -- a PostgreSQL server of its own ---------------------------------------------------------


class OwnServer:
    """A PostgreSQL cluster in a temporary directory, run as ``postgres`` (trust, a free
    port, the default ``max_connections``); ``EVERYSTEP_TEST_PG_PORT`` points at it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="everystep-waiters-held-pg-"))
        self.data = self.root / "data"
        self.port = free_port()

    def _as_postgres(self, *command: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True
        )

    def start(self) -> None:
        user = pwd.getpwnam("postgres")
        os.chown(self.root, user.pw_uid, user.pw_gid)
        initdb = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres"]
        self._as_postgres(*initdb, "--auth=trust", "--no-sync")
        flags = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "start", "-w", "-D", str(self.data), "-l", log, "-o", flags
        )
        os.environ["EVERYSTEP_TEST_PG_HOST"] = "127.0.0.1"
        os.environ["EVERYSTEP_TEST_PG_PORT"] = str(self.port)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres(str(PG_BIN / "pg_ctl"), "stop", "-m", "fast", "-D", str(self.data))
        subprocess.run(["rm", "-rf", str(self.root)], check=False)


# -- uvicorn and the requests ---------------------------------------------------------------


class Uvicorn(async_io.Uvicorn):
    """One uvicorn process of ``--source`` serving ``waiting_asgi``, logging to a file,
    with ``CONN_MAX_AGE`` 0 (Django's default, advised under ASGI)."""

    def __init__(self, source: Path, log_path: Path, log_level: str) -> None:
        super().__init__(source, log_path, log_level, 2048, "0", settings=SETTINGS)

    def wait_listening(self) -> None:
        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        runs.wait_for(listening, 60.0, 0.1, self.check_alive)

    def threads(self) -> int | None:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return None

    def error_lines(self) -> Counter[str]:
        """Its log's error lines, by their text (tracebacks' last lines)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return Counter(line.strip()[:160] for line in lines if "Error:" in line)


@dataclass
class Answer:
    """One request as the client saw it: ``kind`` is ``stream`` or ``result``."""

    kind: str
    run_id: str
    expected: int
    status: int | None = None
    body: str = ""
    error: str | None = None

    def right(self) -> bool:
        if self.status != 200:
            return False
        if self.kind == "stream":
            return self.body.strip().split("\n\n")[-1] == END
        return self.body == f'{{"result": {self.expected}}}'


async def one_request(port: int, answer: Answer) -> None:
    """GET on a connection of its own, HTTP/1.0 (the answer ends when the server closes)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        answer.error = f"connect: {exc!r}"
        return
    try:
        path = f"/{answer.kind}/{answer.run_id}/"
        writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        head, _, body = (await reader.read()).partition(b"\r\n\r\n")
        answer.status = int(head.split(b" ", 2)[1])
        answer.body = body.decode(errors="replace")
    except (OSError, ValueError, IndexError) as exc:
        answer.error = repr(exc)
    finally:
        writer.close()


@dataclass
class Client:
    """Every request at once, on an event loop of its own on a thread."""

    port: int
    answers: list[Answer]
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="waiters-client", daemon=True)

    def _run(self) -> None:
        async def fire() -> None:
            await asyncio.gather(*(one_request(self.port, a) for a in self.answers))

        asyncio.run(fire())

    def answered(self) -> int:
        return sum(a.status is not None or a.error is not None for a in self.answers)


# -- one N ----------------------------------------------------------------------------------


def sessions() -> dict[str, int]:
    """Sessions on the benchmark database but this one, and on the whole server."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE datname = current_database() AND pid <> "
            "pg_backend_pid()), count(*) FILTER (WHERE backend_type = 'client backend'), "
            "current_setting('max_connections')::int FROM pg_stat_activity"
        )
        mine, server, limit = cursor.fetchone()
    return {"db": int(mine), "server": int(server), "max_connections": int(limit)}


def hold(uvicorn: Uvicorn, seconds: float) -> dict[str, Any]:
    """The sessions and the uvicorn process's threads, sampled for ``seconds``."""
    samples = []
    until = time.monotonic() + seconds
    while True:
        samples.append({**sessions(), "threads": uvicorn.threads()})
        uvicorn.check_alive()
        if time.monotonic() >= until:
            break
        time.sleep(SAMPLE_EVERY)
    return {
        "connections_max": max(s["db"] for s in samples),
        "server_sessions_max": max(s["server"] for s in samples),
        "max_connections": samples[0]["max_connections"],
        "threads_max": max(s["threads"] or 0 for s in samples),
        "samples": len(samples),
    }


def wait_settled(client: Client, awaited: Any, n: int, uvicorn: Uvicorn) -> dict[str, Any]:
    """Until every run is awaited or answered, or nothing changed for ``SETTLED`` seconds:
    how long that took, and the most sessions seen meanwhile (the burst of requests)."""
    began = time.monotonic()
    seen, since, peak = None, time.monotonic(), {"db": 0, "server": 0}
    while time.monotonic() - began < max(60.0, n / 2):
        uvicorn.check_alive()
        now_sessions = sessions()
        peak = {key: max(peak[key], now_sessions[key]) for key in peak}
        now = (awaited.count(), client.answered(), now_sessions["db"])
        if now[0] + now[1] >= n:
            break
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLED:
            break
        time.sleep(SAMPLE_EVERY)
    return {
        "settled_s": round(time.monotonic() - began, 2),
        "burst_connections_max": peak["db"],
        "burst_server_sessions_max": peak["server"],
    }


def phase(args: argparse.Namespace, run: Session, n: int) -> dict[str, Any]:
    """N requests (half streams, half results) held, measured, then answered."""
    from everystep_bench.workflows import bench_one

    from everystep.models import Workflow
    from everystep.testing import run_due

    runs.tidy_tables(args.db)
    quiet = wait_quiet(args.wait_quiet)
    since = runs.id_floor()
    runs.schedule_runs(bench_one, n)  # bench_one(i, 1) returns i + 1
    measured = Workflow.objects.filter(id__gte=since)
    rows = sorted(measured.values_list("id", "args"))
    answers = [
        Answer("stream" if i % 2 == 0 else "result", str(pk), int(arguments[0]) + 1)
        for i, (pk, arguments) in enumerate(rows)
    ]
    uvicorn = Uvicorn(args.source, run.scratch / f"uvicorn-{n}.log", args.log_level)
    try:
        uvicorn.wait_listening()
        idle = {**sessions(), "threads": uvicorn.threads()}
        client = Client(uvicorn.port, answers)
        client.thread.start()
        burst = wait_settled(client, measured.filter(awaited=True), n, uvicorn)
        awaited = measured.filter(awaited=True).count()
        answered_early = client.answered()
        held = hold(uvicorn, args.hold)
        run_due()  # here: the server may have no connection left for a worker
        client.thread.join(timeout=max(120.0, n / 2))
    finally:
        uvicorn.stop()
    client.thread.join(timeout=30)
    return {
        "waiters": n,
        "idle": idle,
        **burst,
        "awaited": awaited,
        "answered_before_the_end": answered_early,
        **held,
        **outcome(answers),
        "uvicorn_errors": dict(uvicorn.error_lines().most_common(5)),
        "quiet": quiet,
    }


def outcome(answers: list[Answer]) -> dict[str, Any]:
    """How the requests ended: right, by HTTP status, or with no answer."""
    wrong = Counter(
        str(a.status) if a.status is not None else "no answer" for a in answers if not a.right()
    )
    return {
        "completed": sum(a.right() for a in answers),
        "failed": dict(wrong),
        "failed_examples": [
            f"{a.kind} {a.status} {a.error or a.body[-200:]}" for a in answers if not a.right()
        ][:3],
    }


# -- the benchmark ---------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    phases = []
    for n in args.waiters:
        phases.append(phase(args, run, n))
        p = phases[-1]
        print(
            f"  N={n}: {p['connections_max']} connections, {p['threads_max']} threads, "
            f"{p['completed']}/{n} completed",
            flush=True,
        )
    return {"phases": phases}


def print_summary(record: dict[str, Any]) -> None:
    print_header(record)
    print(
        "N open waits under uvicorn (half awatch SSE streams, half aresult views, each "
        "reading the ORM first), sampled while they wait:"
    )
    form = "  {:>5}{:>14}{:>8}{:>8}{:>10}{:>8}{:>12}  {}"
    head = ("N", "connections", "(idle)", "(burst)", "threads", "(idle)", "completed", "failed")
    print(form.format(*head))
    for p in record["phases"]:
        cells = (
            p["waiters"],
            p["connections_max"],
            p["idle"]["db"],
            p["burst_connections_max"],
            p["threads_max"],
            p["idle"]["threads"],
            f"{p['completed']}/{p['waiters']}",
            p["failed"] or "-",
        )
        print(form.format(*map(str, cells)))
    limit = record["phases"][0]["max_connections"]
    busiest = max(p["burst_server_sessions_max"] for p in record["phases"])
    print(f"  the server's sessions in all, max {busiest} of max_connections {limit}")
    for p in record["phases"]:
        for line, count in p["uvicorn_errors"].items():
            print(f"  N={p['waiters']} uvicorn: {count} x {line}")
    print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = OwnServer() if args.own_server else None
    failed: list[str] = []

    def report(record: dict[str, Any]) -> None:
        failed.extend(str(p["waiters"]) for p in record["phases"] if p["failed"])
        print_summary(record)

    try:
        if server is not None:
            server.start()
        run_benchmark("waiters_held", args, lambda run: benchmark(args, run), report)
    finally:
        if server is not None:
            server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
