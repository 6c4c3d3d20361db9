"""Async runs and async waiters (issue 36): I/O-bound runs through one worker, a pool of
threads against the event loop, and ``aresult()`` waiters in one uvicorn process.

    .venv/bin/python bench/async_io.py --db postgres|mariadb|sqlite [--only io|waiters]
        [--runs 1000] [--io 1.0] [--sync-pool 8] [--async-pool 200] [--repeat 1]
        [--waiters 1000] [--hold 3] [--asgi-conn-max-age 0] [--wait-quiet 60]
        [--source PATH] [--label NAME] [--keep-logs]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end):

- **I/O** (``--only io``), each round two phases, in alternating order, each with one
  fresh ``manage.py everystep_worker --poll 0.05`` started and idle before the clock
  starts: ``--runs`` runs whose one step waits ``--io`` seconds for simulated I/O
  (``everystep_bench/async_workflows.py``), scheduled in one transaction:

  - ``sync``: ``bench_io_sync``, whose sync step blocks in ``time.sleep``, through
    ``--pool 8`` (``--sync-pool``): a pool thread per run in flight;
  - ``async``: ``bench_io_async``, whose async step awaits ``asyncio.sleep``, through
    ``--pool 200`` (``--async-pool``): tasks on the worker's event loop.

  Per phase: the wall time from just before the schedule to the last ``completed_at``,
  runs/s, the overlap (runs * io / first start to last end: the runs in I/O at once, on
  average), and the worker process's peak RSS (``VmHWM`` of ``/proc/<pid>/status``, and
  ``VmRSS`` sampled every 0.1 s), its threads (``Threads``, sampled, max), its
  connections to the database (its TCP sockets to the server's port, or its open
  descriptors of the SQLite file, sampled, max) and its CPU.

- **waiters** (``--only waiters``): one worker ``--pool 200`` parks ``--waiters`` runs of
  ``bench_waits`` (an async body waiting for the event ``go``). One uvicorn process
  serves ``everystep_bench/async_asgi.py`` (``CONN_MAX_AGE`` 0, as Django advises under
  ASGI: ``--asgi-conn-max-age``), whose async view awaits ``everystep.aresult(run)``.
  The benchmark opens one HTTP connection per run at once (asyncio streams, on a
  thread) and waits until the uvicorn process's hub holds every waiter (``GET
  /waiting/``); then, for ``--hold`` seconds, it samples the connections the uvicorn
  process holds to the database (its sockets to the server's port and, at the server,
  PostgreSQL's ``pg_stat_activity`` rows / MariaDB's ``processlist`` rows from those
  ports; SQLite: its descriptors of the database file), its threads and RSS. Then it
  sends every run its event in one transaction; the worker completes them, the waiters
  wake and answer. The wake latency of each: the response's arrival minus its
  run's ``completed_at`` (one machine, one clock), p50/p90/p99/max.

Every figure of one invocation comes from the same tree and machine state; the result
line (kind ``async_io``) goes to ``bench/results/async_io.jsonl``. Exits 1 if a run did
not complete or an answer was wrong or missing.

The sync hot path (issue 36's third figure) is not measured here: it is
``compare.py --db postgres --runs 500 --repeat 3 --conn-max-age 600`` (and
``instructions.py --db postgres``), run on the tree before and after.

A smoke run: ``--runs 20 --io 0.2 --waiters 20 --wait-quiet 0 --results /tmp/smoke``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import options, runs, server
from harness.cpu import CpuMeter, wait_quiet
from harness.results import print_header, print_problems
from harness.session import Session, run_benchmark
from harness.workers import Workers, worker_env

SYNC, ASYNC = "sync", "async"
WAIT_EVERY = 0.05  # how often the benchmark looks at the rows while a phase runs
SAMPLE_EVERY = 0.1  # /proc readings of a measured process
ASGI_SETTINGS = "everystep_bench.async_asgi"
ASGI_APP = f"{ASGI_SETTINGS}:application"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument(
        "--only", choices=("io", "waiters"), help="one of the two measurements (both)"
    )
    parser.add_argument("--runs", type=int, default=1000, help="I/O runs per phase (1000)")
    parser.add_argument("--io", type=float, default=1.0, help="seconds of I/O per run (1.0)")
    parser.add_argument("--sync-pool", type=int, default=8, help="sync phase's --pool (8)")
    parser.add_argument(
        "--async-pool", type=int, default=200, help="async phase's and waiters' --pool (200)"
    )
    parser.add_argument("--poll", type=float, default=0.05, help="worker --poll (0.05)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the I/O phases (1)")
    parser.add_argument("--waiters", type=int, default=1000, help="aresult() waiters (1000)")
    parser.add_argument(
        "--hold",
        type=float,
        default=3.0,
        help="seconds the waiters are held, every waiter registered, while the uvicorn "
        "process's connections are sampled (3)",
    )
    parser.add_argument(
        "--asgi-conn-max-age",
        default="0",
        metavar="SECONDS",
        help="CONN_MAX_AGE of the uvicorn process: an integer, 'none' or 'settings' (0: "
        "Django's default, which its docs advise under ASGI)",
    )
    options.add_worker_phase_arguments(parser)
    args = parser.parse_args(argv)
    options.check_conn_max_age(parser, [args.asgi_conn_max_age])
    if min(args.runs, args.sync_pool, args.async_pool, args.repeat, args.waiters) < 1:
        parser.error("--runs, --sync-pool, --async-pool, --repeat, --waiters must be >= 1")
    if args.io < 0 or args.hold < 0:
        parser.error("--io and --hold must not be negative")
    return args


# -- /proc readings of one process ---------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """``Threads``, ``VmRSS`` and ``VmHWM`` (kB) of ``pid``; empty once it has exited."""
    wanted = ("Threads", "VmRSS", "VmHWM")
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in wanted:
            found[key] = int(value.split()[0])
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def db_socket_ports(pid: int, db_port: int) -> list[int]:
    """The local ports of ``pid``'s established TCP connections to ``db_port``: its
    connections to the database server (which runs on this machine)."""
    inodes = _socket_inodes(pid)
    ports = []
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cells = row.split()
            local, remote, state, inode = cells[1], cells[2], cells[3], cells[9]
            if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == db_port:
                ports.append(int(local.rsplit(":", 1)[1], 16))
    return sorted(ports)


def sqlite_descriptors(pid: int, path: str) -> int:
    """How many descriptors ``pid`` holds of the SQLite file ``path``: one per connection."""
    real, count = os.path.realpath(path), 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == real
        except OSError:
            continue
    return count


def server_sessions(db: str, ports: list[int]) -> dict[str, int] | None:
    """What the database server says of the sessions from ``ports`` (this machine's):
    PostgreSQL's ``pg_stat_activity`` rows and those LISTENing; MariaDB's ``processlist``
    rows. None for SQLite."""
    from django.db import connection

    if db == "sqlite":
        return None
    if not ports:
        return {"sessions": 0, "listen": 0} if db == "postgres" else {"sessions": 0}
    with connection.cursor() as cursor:
        if db == "postgres":
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN %%') "
                "FROM pg_stat_activity WHERE client_port = ANY(%s)",
                [ports],
            )
            sessions, listen = cursor.fetchone()
            return {"sessions": int(sessions), "listen": int(listen)}
        marks = ", ".join(["%s"] * len(ports))
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.processlist "
            f"WHERE SUBSTRING_INDEX(HOST, ':', -1) IN ({marks})",
            [str(port) for port in ports],
        )
        return {"sessions": int(cursor.fetchone()[0])}


def db_target() -> str | int:
    """What a connection to the benchmark's database is: the SQLite file's path, or the
    server's port. Read on the main thread (a sampler thread has its own connection
    objects)."""
    from django.db import connection

    settings = connection.settings_dict
    return str(settings["NAME"]) if connection.vendor == "sqlite" else int(settings["PORT"])


def db_connections(db: str, pid: int, target: str | int) -> tuple[int, list[int]]:
    """(connections ``pid`` holds to the benchmark's database, their local ports);
    ``target``: ``db_target()``."""
    if db == "sqlite":
        return sqlite_descriptors(pid, str(target)), []
    ports = db_socket_ports(pid, int(target))
    return len(ports), ports


@dataclass
class ProcSampler:
    """A process's threads, RSS and connections to the database, read every
    ``SAMPLE_EVERY`` seconds on a thread of the benchmark until ``stop``."""

    db: str
    pid: int
    target: str | int  # db_target()
    threads: list[int] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)
    hwm_kb: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ProcSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        status = proc_status(self.pid)
        if not status:
            return
        self.threads.append(status["Threads"])
        self.rss_kb.append(status["VmRSS"])
        self.hwm_kb = max(self.hwm_kb, status["VmHWM"])
        with contextlib.suppress(OSError):  # exited meanwhile
            self.connections.append(db_connections(self.db, self.pid, self.target)[0])

    def stop(self) -> dict[str, Any]:
        """Stop sampling (after a last sample); the figures."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return {
            "samples": len(self.threads),
            "threads_start": self.threads[0] if self.threads else None,
            "threads_max": max(self.threads, default=None),
            "rss_start_mb": round(self.rss_kb[0] / 1024, 1) if self.rss_kb else None,
            "rss_max_mb": round(max(self.rss_kb) / 1024, 1) if self.rss_kb else None,
            "peak_rss_mb": round(self.hwm_kb / 1024, 1),  # VmHWM: the kernel's peak
            "connections_max": max(self.connections, default=None),
        }


# -- runs ----------------------------------------------------------------------------------


def schedule_rows(workflow: Callable[..., Any], arguments: list[list[Any]]) -> None:
    """One run of ``workflow(*args)`` per item of ``arguments``, in one transaction: the
    rows ``everystep.schedule`` makes, inserted ``runs.SCHEDULE_BATCH`` per statement,
    and one wake-up (as ``harness.runs.schedule_runs``, with arguments of our own)."""
    from django.db import transaction

    from everystep import registry, serde
    from everystep.models import Workflow
    from everystep.store.wake import notify_due

    defn = registry.workflow_def(workflow)
    if defn is None:
        raise TypeError(f"{workflow!r} is not a @workflow function")
    where = f"arguments of workflow {defn.name}"
    rows = [Workflow(name=defn.name, args=serde.encode(args, where)) for args in arguments]
    with transaction.atomic():
        Workflow.objects.bulk_create(rows, batch_size=runs.SCHEDULE_BATCH)
        notify_due()


def seconds(later: Any, earlier: Any) -> float | None:
    """``later - earlier`` in seconds (datetimes, or ``earlier`` a Unix time)."""
    if later is None or earlier is None:
        return None
    start = earlier if isinstance(earlier, float) else earlier.timestamp()
    return round(later.timestamp() - start, 3)


# -- (a) I/O-bound runs through one worker ---------------------------------------------------


def io_phase(args: argparse.Namespace, workers: Workers, what: str, name: str) -> dict[str, Any]:
    """One worker (``--pool`` of ``what``) through ``--runs`` runs of ``--io`` seconds."""
    from django.db.models import Count, Max, Min
    from everystep_bench.async_workflows import bench_io_async, bench_io_sync

    from everystep.models import Status, Workflow

    if what == SYNC:
        workflow, pool = bench_io_sync, args.sync_pool
    else:
        workflow, pool = bench_io_async, args.async_pool
    runs.tidy_tables(args.db)
    quiet = wait_quiet(args.wait_quiet)
    worker = workers.start_fleet(name, 1, "--pool", str(pool), "--poll", str(args.poll))[0]
    sampler = ProcSampler(args.db, worker.pid, db_target()).start()
    meter = CpuMeter(args.db, [worker.pid])
    meter.begin_workers()
    scheduled = time.time()
    since = runs.id_floor(scheduled)
    schedule_rows(workflow, [[i, args.io] for i in range(args.runs)])
    meter.begin()
    timeout = max(600.0, 3 * args.runs * args.io / pool + 120)
    runs.wait_for(lambda: runs.pending_runs() == 0, timeout, WAIT_EVERY, worker.check_alive)
    cpu = meter.end()
    proc = sampler.stop()
    exit_code = worker.terminate()

    measured = Workflow.objects.filter(id__gte=since)
    span = measured.aggregate(first=Min("started_at"), last=Max("completed_at"))
    statuses = dict(measured.order_by().values_list("status").annotate(n=Count("id")))
    completed = statuses.get(Status.COMPLETED, 0)
    to_done = seconds(span["last"], scheduled)
    busy = seconds(span["last"], span["first"])
    return {
        "phase": what,
        "pool": pool,
        "runs": args.runs,
        "io_s": args.io,
        "completed": completed,
        "statuses": statuses,
        "to_done_s": to_done,
        "span_s": busy,
        "runs_per_s": round(completed / to_done, 1) if completed and to_done else 0.0,
        # The runs in their I/O at once, on average: at most --pool.
        "overlap": round(completed * args.io / busy, 1) if completed and busy else None,
        **proc,
        "worker_cpu_s": cpu["worker_s"],
        "worker_cpu_ms_per_run": round(1000 * cpu["worker_s"] / max(completed, 1), 3),
        "db_cpu_ms_per_run": round(1000 * cpu["db_server_s"] / max(completed, 1), 3),
        "cpu": cpu,
        "quiet": quiet,
        "exit_code": exit_code,
    }


def print_io_phase(round_no: int, p: dict[str, Any]) -> None:
    line = (
        f"  round {round_no}  {p['phase']:<5} --pool {p['pool']:<4} {p['to_done_s']}s to done  "
        f"{p['runs_per_s']} runs/s  overlap {p['overlap']}  {p['completed']}/{p['runs']} "
        f"completed  peak RSS {p['peak_rss_mb']} MB (sampled max {p['rss_max_mb']})  "
        f"threads max {p['threads_max']} (idle {p['threads_start']})  db connections max "
        f"{p['connections_max']}  worker CPU {p['worker_cpu_s']}s  other {p['cpu']['other_s']}s"
    )
    if not p["quiet"]["quiet"]:
        line += f"  (started while others used {p['quiet']['other_cpus']} CPU)"
    print(line, flush=True)


def measure_io(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    phases: list[dict[str, Any]] = []
    for index in range(args.repeat):
        order = [SYNC, ASYNC] if index % 2 == 0 else [ASYNC, SYNC]
        for what in order:
            name = f"io-{index + 1}-{what}"
            measured = server.attempts(
                name,
                lambda what=what, name=name: io_phase(args, run.workers, what, name),
                run.workers.kill_all,
            )
            phases.append(measured)
            print_io_phase(index + 1, measured)
    summary: dict[str, Any] = {}
    keys = (
        "to_done_s",
        "runs_per_s",
        "overlap",
        "peak_rss_mb",
        "rss_max_mb",
        "threads_max",
        "connections_max",
        "worker_cpu_ms_per_run",
    )
    for what in (SYNC, ASYNC):
        mine = [p for p in phases if p["phase"] == what]
        summary[what] = {key: median([p[key] for p in mine]) for key in keys}
        summary[what]["pool"] = mine[0]["pool"]
    pairs = zip(
        [p for p in phases if p["phase"] == ASYNC],
        [p for p in phases if p["phase"] == SYNC],
        strict=True,
    )
    summary["async_to_sync_wall"] = median(
        [a["to_done_s"] / s["to_done_s"] for a, s in pairs if a["to_done_s"] and s["to_done_s"]]
    )
    return {"phases": phases, "summary": summary}


def median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


# -- (b) aresult() waiters in one uvicorn process ------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Uvicorn:
    """One ``uvicorn`` process of ``--source`` serving ``settings``' project (this bench's
    ``async_asgi.py`` unless told otherwise), logging to a file."""

    def __init__(
        self,
        source: Path,
        log_path: Path,
        log_level: str,
        backlog: int,
        conn_max_age: str,
        settings: str = ASGI_SETTINGS,
    ) -> None:
        self.port = free_port()
        self.log_path = log_path
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            ASGI_APP,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backlog",
            str(backlog),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        extra = {"DJANGO_SETTINGS_MODULE": settings, **options.conn_max_age_env(conn_max_age)}
        env = worker_env(source, log_level, extra)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.pid = self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"uvicorn exited with {self.proc.returncode}:\n{tail}")

    def get(self, path: str, timeout: float = 30.0) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:500]!r}")
        return dict(json.loads(body))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until it answers ``/waiting/`` (Django set up, the hub started)."""

        def answering() -> bool:
            try:
                self.get("/waiting/", timeout=5)
                return True
            except OSError:
                return False

        runs.wait_for(answering, timeout, 0.1, self.check_alive)

    def stop(self) -> int | None:
        """SIGTERM, then wait; its exit code, or None if it had to be killed."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            return None

    def problems(self) -> list[str]:
        lines = self.log_path.read_text(errors="replace").splitlines()
        keys = ("WARNING", "ERROR", "CRITICAL", "Traceback")
        return [f"uvicorn: {line}" for line in lines if any(k in line for k in keys)]


@dataclass
class Answer:
    """One waiter's HTTP exchange, as the client saw it."""

    run_id: str
    status: int | None = None
    body: dict[str, Any] | None = None
    arrived: float | None = None  # time.time() at the end of the response
    error: str | None = None


async def one_request(port: int, answer: Answer, connected: list[int]) -> None:
    """GET ``/wait/<run>/`` on a connection of its own; the whole response."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        answer.error = f"connect: {exc!r}"
        return
    connected[0] += 1
    try:
        # HTTP/1.0: the answer ends when the server closes, with no chunked encoding.
        writer.write(f"GET /wait/{answer.run_id}/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        answer.arrived = time.time()
        head, _, body = data.partition(b"\r\n\r\n")
        answer.status = int(head.split(b" ", 2)[1])
        answer.body = json.loads(body)
    except (OSError, ValueError, IndexError) as exc:
        answer.error = repr(exc)
    finally:
        writer.close()


class Client:
    """Every waiter's request at once, on an event loop of its own on a thread."""

    def __init__(self, port: int, run_ids: list[str]) -> None:
        self.answers = [Answer(run_id) for run_id in run_ids]
        self.connected = [0]
        self.port = port
        self.thread = threading.Thread(target=self._run, name="waiters-client", daemon=True)

    def _run(self) -> None:
        async def fire() -> None:
            await asyncio.gather(
                *(one_request(self.port, answer, self.connected) for answer in self.answers)
            )

        asyncio.run(fire())

    def start(self) -> None:
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()


def hold_sample(db: str, uvicorn: Uvicorn) -> dict[str, Any]:
    """The uvicorn process's connections to the database now: its own count (sockets or
    SQLite descriptors), the server's, its threads and RSS."""
    held, ports = db_connections(db, uvicorn.pid, db_target())
    status = proc_status(uvicorn.pid)
    return {
        "connections": held,
        "server": server_sessions(db, ports),
        "threads": status.get("Threads"),
        "rss_mb": round(status.get("VmRSS", 0) / 1024, 1),
    }


def waiters_phase(args: argparse.Namespace, run: Session, name: str) -> dict[str, Any]:
    """``--waiters`` aresult() waiters in one uvicorn process, woken by their runs' ends."""
    from django.db import transaction
    from django.db.models import Count
    from everystep_bench.async_workflows import bench_waits

    import everystep
    from everystep.models import Status, Workflow

    runs.tidy_tables(args.db)
    quiet = wait_quiet(args.wait_quiet)
    log = run.scratch / f"{name}-uvicorn.log"
    backlog = 2 * args.waiters + 128
    uvicorn = Uvicorn(args.source, log, args.log_level, backlog, args.asgi_conn_max_age)
    try:
        worker = run.workers.start_fleet(
            name, 1, "--pool", str(args.async_pool), "--poll", str(args.poll)
        )[0]
        uvicorn.wait_ready()
        idle = hold_sample(args.db, uvicorn)

        def alive() -> None:
            worker.check_alive()
            uvicorn.check_alive()

        # The runs, parked: each has run to its wait for "go" and been released.
        since = runs.id_floor()
        schedule_rows(bench_waits, [[i] for i in range(args.waiters)])
        measured = Workflow.objects.filter(id__gte=since)
        parked = measured.filter(status=Status.SCHEDULED, waiting_for="go", claimed_by=None)
        timeout = max(120.0, args.waiters / 10)
        runs.wait_for(lambda: parked.count() == args.waiters, timeout, WAIT_EVERY, alive)
        # Each run's argument, which its answer must carry plus the event's 1.
        argument = {str(pk): arguments[0] for pk, arguments in measured.values_list("id", "args")}
        ids = sorted(argument)

        # Every waiter's request at once; until every one is registered with the hub.
        client = Client(uvicorn.port, ids)
        fired = time.monotonic()
        client.start()
        # Not a wait_for: waiters that never all register (failed looks) are a result to
        # report, not a phase to measure again.
        deadline = time.monotonic() + timeout
        while uvicorn.get("/waiting/")["waiting"] < args.waiters and not client.done():
            alive()
            if time.monotonic() > deadline:
                break
            time.sleep(WAIT_EVERY)
        registered_s = round(time.monotonic() - fired, 3)
        hub_before = uvicorn.get("/waiting/")
        samples = []
        held_until = time.monotonic() + args.hold
        while True:
            samples.append(hold_sample(args.db, uvicorn))
            alive()
            if time.monotonic() >= held_until:
                break
            time.sleep(0.25)
        hub_held = uvicorn.get("/waiting/")
        awaited = measured.filter(awaited=True).count()

        # Their ends: every run's event in one transaction; the worker completes them.
        sent_at = time.time()
        with transaction.atomic():
            for run_id in ids:
                everystep.send(run_id, "go", 1)
        sent_s = round(time.time() - sent_at, 3)
        runs.wait_for(client.done, timeout, WAIT_EVERY, alive)
        hub_after = uvicorn.get("/waiting/")
        after = hold_sample(args.db, uvicorn)
        worker_exit = worker.terminate()
    finally:
        uvicorn_exit = uvicorn.stop()
    problems = uvicorn.problems()

    finished = dict(measured.values_list("id", "completed_at"))
    statuses = dict(measured.order_by().values_list("status").annotate(n=Count("id")))
    latencies, wrong, missing = [], [], []
    for answer in client.answers:
        expected = argument[answer.run_id] + 1
        ended = finished.get(uuid.UUID(answer.run_id))
        if answer.arrived is None or answer.status is None:
            missing.append(f"{answer.run_id}: {answer.error}")
            continue
        if answer.status != 200 or (answer.body or {}).get("result") != expected:
            wrong.append(f"{answer.run_id}: {answer.status} {answer.body or answer.error}")
        elif ended is not None:  # a wake-up: only a right answer has one
            latencies.append(1000 * (answer.arrived - ended.timestamp()))
    last_end = max((t for t in finished.values() if t is not None), default=None)
    last_arrival = max((a.arrived for a in client.answers if a.arrived), default=None)
    held = [sample["connections"] for sample in samples]
    server_held = [s["server"]["sessions"] for s in samples if s["server"] is not None]
    return {
        "phase": "waiters",
        "waiters": args.waiters,
        "pool": args.async_pool,
        "completed": statuses.get(Status.COMPLETED, 0),
        "statuses": statuses,
        "connected": client.connected[0],
        "answered": len(client.answers) - len(missing),
        "wrong": wrong[:20],
        "wrong_count": len(wrong),
        "missing": missing[:20],
        "missing_count": len(missing),
        "registered_s": registered_s,
        "all_registered": hub_before["waiting"] >= args.waiters,
        "awaited_marked": awaited,
        "idle": idle,
        "held": {
            "connections_max": max(held, default=None),
            "connections_last": held[-1] if held else None,
            "server_sessions_max": max(server_held, default=None),
            "threads_max": max((s["threads"] for s in samples), default=None),
            "rss_max_mb": max((s["rss_mb"] for s in samples), default=None),
            "samples": samples,
        },
        "after": after,
        "hub": {"registered": hub_before, "held": hub_held, "after": hub_after},
        "events_sent_s": sent_s,
        "wake_ms": {
            "count": len(latencies),
            "p50": round(runs.percentile(latencies, 0.5), 1) if latencies else None,
            "p90": round(runs.percentile(latencies, 0.9), 1) if latencies else None,
            "p99": round(runs.percentile(latencies, 0.99), 1) if latencies else None,
            "max": round(max(latencies), 1) if latencies else None,
            "min": round(min(latencies), 1) if latencies else None,
        },
        "last_end_to_last_answer_s": (
            round(last_arrival - last_end.timestamp(), 3) if last_end and last_arrival else None
        ),
        "quiet": quiet,
        "uvicorn_problems": problems[:20],
        "exit_codes": {"worker": worker_exit, "uvicorn": uvicorn_exit},
    }


def measure_waiters(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    name = "waiters"
    return server.attempts(name, lambda: waiters_phase(args, run, name), run.workers.kill_all)


# -- the benchmark ---------------------------------------------------------------------------


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    if args.only in (None, "io"):
        parts["io"] = measure_io(args, run)
    if args.only in (None, "waiters"):
        parts["waiters"] = measure_waiters(args, run)
    return parts


def failures(record: dict[str, Any]) -> list[str]:
    """What went wrong, whatever the timings: runs not completed, answers wrong or missing."""
    found = []
    for p in record.get("io", {}).get("phases", []):
        if p["completed"] != p["runs"]:
            found.append(f"io {p['phase']}: {p['completed']} of {p['runs']} completed")
    waiters = record.get("waiters")
    if waiters is not None:
        if waiters["completed"] != waiters["waiters"]:
            found.append(f"waiters: {waiters['completed']} of {waiters['waiters']} completed")
        if waiters["wrong_count"] or waiters["missing_count"]:
            found.append(
                f"waiters: {waiters['wrong_count']} wrong answers, "
                f"{waiters['missing_count']} missing: {(waiters['wrong'] + waiters['missing'])[:3]}"
            )
    return found


def print_summary(record: dict[str, Any]) -> None:
    args = record["args"]
    print_header(record)
    if "io" in record:
        s = record["io"]["summary"]
        print(
            f"{args['runs']} runs whose one step waits {args['io']}s of I/O, one worker "
            f"--poll {args['poll']}; medians of {args['repeat']} round(s)"
        )
        head = (
            "",
            "wall s",
            "runs/s",
            "overlap",
            "peak RSS MB",
            "threads",
            "db conns",
            "ms CPU/run",
        )
        form = "  {:<22}{:>8}{:>8}{:>9}{:>13}{:>9}{:>10}{:>12}"
        print(form.format(*head))
        for what, label in ((SYNC, "sync step"), (ASYNC, "async step")):
            m = s[what]
            cells = (
                f"{label} --pool {m['pool']}",
                m["to_done_s"],
                m["runs_per_s"],
                m["overlap"],
                m["peak_rss_mb"],
                m["threads_max"],
                m["connections_max"],
                m["worker_cpu_ms_per_run"],
            )
            print(form.format(*map(str, cells)))
        print(f"  async / sync, wall time: {s['async_to_sync_wall']}x")
    if "waiters" in record:
        w = record["waiters"]
        held, wake, idle = w["held"], w["wake_ms"], w["idle"]
        print(
            f"{w['waiters']} aresult() waiters in one uvicorn process (an async view each, "
            f"one HTTP connection each), woken by their runs' ends (one worker --pool "
            f"{w['pool']})"
        )
        registered = (
            f"all registered {w['registered_s']}s after the first request"
            if w["all_registered"]
            else f"NOT all registered: the hub held {w['hub']['registered']['waiting']}"
        )
        seen = held["server_sessions_max"]
        at_server = "" if seen is None else f"the server sees {seen}; "
        print(
            f"  {registered}; while they wait ({args['hold']}s): db connections held by "
            f"uvicorn max {held['connections_max']} ({at_server}idle before: "
            f"{idle['connections']}), threads max {held['threads_max']} (idle "
            f"{idle['threads']}), RSS max {held['rss_max_mb']} MB (idle {idle['rss_mb']})"
        )
        print(
            f"  wake latency (completed_at -> response): p50 {wake['p50']} ms, p90 "
            f"{wake['p90']} ms, p99 {wake['p99']} ms, max {wake['max']} ms over "
            f"{wake['count']}; last end -> last answer {w['last_end_to_last_answer_s']}s; "
            f"events sent in {w['events_sent_s']}s"
        )
        print(
            f"  answered {w['answered']}, wrong {w['wrong_count']}, missing "
            f"{w['missing_count']}; hub while held {w['hub']['held']}, after "
            f"{w['hub']['after']}"
        )
        for line in w["uvicorn_problems"][:5]:
            print(f"  {line}")
    for line in failures(record):
        print(f"FAILED: {line}")
    print_problems(record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    failed: list[str] = []

    def report(record: dict[str, Any]) -> None:
        failed.extend(failures(record))
        print_summary(record)

    run_benchmark("async_io", args, lambda run: benchmark(args, run), report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
