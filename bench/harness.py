"""What the benchmarks share: which source tree is measured, a fresh database (and a
``session`` that creates and drops it), scheduling and counting runs, worker
subprocesses, CPU and memory readings from ``/proc``.

The source tree (``--source``, default: the repository this ``bench/`` belongs to) is
put first on ``sys.path`` and on the workers' ``PYTHONPATH``, so ``everystep`` and the
``tests`` project are imported from it, not from the editable install; ``bench/`` comes
next for ``everystep_bench`` (``DJANGO_SETTINGS_MODULE=everystep_bench.settings``). To
measure an older commit: ``git worktree add /tmp/everystep-before <commit>`` and pass
``--source /tmp/everystep-before``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results.jsonl"
PROFILES = BENCH / "profiles"
SETTINGS = "everystep_bench.settings"
EXIT_TIMEOUT = 60.0  # above the worker's default 30 s drain
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DB_SERVER_COMMANDS = {"postgres": {"postgres"}, "mariadb": {"mariadbd", "mysqld"}, "sqlite": set()}


# -- which code, which database --------------------------------------------------------


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], required=True)
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(os.environ.get("EVERYSTEP_BENCH_SOURCE", ROOT)),
        help="tree whose everystep/, tests/ and manage.py are measured "
        "(default: $EVERYSTEP_BENCH_SOURCE or this repository)",
    )
    parser.add_argument(
        "--label", default="current", help="names the result line and profile files (current)"
    )


def add_worker_phase_arguments(parser: argparse.ArgumentParser) -> None:
    """How a phase that starts worker processes waits for a quiet machine and keeps the
    workers' logs: ``--wait-quiet``, ``--log-level``, ``--keep-logs``."""
    add_wait_quiet_argument(parser, "phase")
    parser.add_argument("--log-level", default="INFO", help="worker log level (INFO)")
    parser.add_argument("--keep-logs", action="store_true", help="keep worker logs")


def add_wait_quiet_argument(parser: argparse.ArgumentParser, before_each: str) -> None:
    """``--wait-quiet``: seconds to wait before each ``before_each`` for a quiet machine."""
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=60,
        help=f"before each {before_each}, wait up to this many seconds for the rest of the "
        "machine to use < 0.25 CPU (60; 0 = do not wait)",
    )


def configure(db: str, source: Path, scratch: Path) -> None:
    """Point the settings at a fresh, uniquely named database and put ``source`` first on
    ``sys.path``; call before Django is imported."""
    for key in [k for k in os.environ if k.startswith("EVERYSTEP_")]:
        if not key.startswith("EVERYSTEP_TEST_") or key in {
            "EVERYSTEP_TEST_SUBPROCESS",
            "EVERYSTEP_TEST_CONN_MAX_AGE",
        }:
            del os.environ[key]
    os.environ["EVERYSTEP_TEST_DB"] = db
    os.environ["EVERYSTEP_TEST_DB_SUFFIX"] = f"bench_{uuid.uuid4().hex[:8]}"
    os.environ["EVERYSTEP_TEST_SQLITE_DIR"] = str(scratch)
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    for path in (str(BENCH), str(source)):  # source ends up first
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def setup_django(source: Path) -> None:
    """``django.setup()``, refusing to go on if ``everystep`` is not imported from ``source``."""
    import django

    django.setup()
    import everystep

    where = Path(everystep.__file__).resolve()
    if not where.is_relative_to(source.resolve()):
        raise SystemExit(f"everystep imported from {where}, not from --source {source}")


def source_info(source: Path) -> dict[str, Any]:
    import everystep

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(source), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    return {
        "path": str(source.resolve()),
        "everystep": str(Path(everystep.__file__).resolve().parent),
        "commit": git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the library itself (the benchmarks do not count).
        "dirty": bool(git("status", "--porcelain", "--", "everystep")),
    }


def create_database() -> str:
    """Create ``everystep_test_bench_…`` with migrations; the name to restore afterwards."""
    from django.db import connection

    original = str(connection.settings_dict["NAME"])
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return original


def drop_database(original_name: str) -> None:
    """Drop the benchmark database, if it got as far as being created."""
    from django.db import DatabaseError, connection

    name = str(connection.settings_dict["NAME"])
    if "everystep_test_bench_" not in name:  # still the server's own database
        return
    if connection.vendor == "sqlite" and not os.path.exists(name):
        return
    error: Exception | None = None
    for _ in range(10):  # someone may restart the server meanwhile
        try:
            if connection.vendor == "postgresql":
                # Connections left by threads of this process that have ended (an
                # embedded worker's pool) would make PostgreSQL refuse the drop.
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()",
                        [name],
                    )
                connection.close()
            connection.creation.destroy_test_db(original_name, verbosity=0)
            return
        except DatabaseError as exc:
            error = exc
            connection.close()
            time.sleep(2)
    print(f"could not drop database {name} ({error}): drop it by hand", file=sys.stderr)


def database_version() -> str:
    from django.db import connection

    query = {
        "postgresql": "SHOW server_version",
        "mysql": "SELECT VERSION()",
        "sqlite": "SELECT sqlite_version()",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(query)
        return f"{connection.display_name} {cursor.fetchone()[0]}"


def machine_info() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "db_version": database_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def install_interrupts() -> None:
    """SIGTERM and SIGINT (even when a background shell ignores it) reach ``finally``."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)


def append_result(record: dict[str, Any]) -> None:
    with open(RESULTS, "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")


@dataclass
class Session:
    """What a benchmark run has while its database exists."""

    scratch: Path  # worker logs and other scratch files
    workers: Workers
    info: dict[str, Any]  # machine_info() at the start


@contextmanager
def session(args: argparse.Namespace, prefix: str) -> Iterator[Session]:
    """Set up Django on a fresh benchmark database (``args.db``, ``args.source``) and
    drop it afterwards, whatever happens; worker logs are kept (and their folder
    printed) with ``args.keep_logs`` or when the benchmark did not finish."""
    install_interrupts()
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    configure(args.db, args.source, scratch)
    setup_django(args.source)
    workers = Workers(args.source, scratch, getattr(args, "log_level", "INFO"))
    original = create_database()
    finished = False
    try:
        yield Session(scratch, workers, machine_info())
        finished = True
    finally:
        workers.kill_all()
        drop_database(original)
        if getattr(args, "keep_logs", False) or not finished:
            print(f"worker logs kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def result_record(
    kind: str, args: argparse.Namespace, run: Session, **parts: Any
) -> dict[str, Any]:
    """One line of ``results.jsonl``: what was measured, with what, where, and the
    workers' complaints; call inside ``session``."""
    run.info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "kind": kind,
        "db": args.db,
        "label": args.label,
        "args": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "keep_logs"
        },
        "source": source_info(args.source),
        "machine": run.info,
        **parts,
        "worker_problems": run.workers.problems(),
    }


def run_benchmark(
    kind: str,
    args: argparse.Namespace,
    benchmark: Callable[[Session], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
) -> int:
    """A benchmark script's main: ``benchmark(session)`` on a fresh database, then its
    result line reported (``report``) and appended to ``results.jsonl``."""
    with session(args, f"everystep-{kind}-") as current:
        record = result_record(kind, args, current, **benchmark(current))
    report(record)
    append_result(record)
    return 0


def print_header(record: dict[str, Any]) -> None:
    """The first line of a report: database, machine, load, the source measured."""
    info, source = record["machine"], record["source"]
    print(
        f"\n{info['db_version']}, {info['nproc']} CPUs, load {info['loadavg_start']} -> "
        f"{info['loadavg_end']}; source {source['path']} "
        f"({source['commit']}{', dirty' if source['dirty'] else ''}), label {record['label']}"
    )


def print_problems(record: dict[str, Any]) -> None:
    """The last lines of a report: the workers' log lines at WARNING or above."""
    problems = record["worker_problems"]
    print(f"worker log lines at WARNING or above: {len(problems)}")
    for line in problems[:10]:
        print(f"  {line}")


# -- a shared database server ------------------------------------------------------------
#
# Other sessions on the machine may restart the database server in the middle of a
# phase: the phase is then measured again, up to ``ATTEMPTS`` times.

ATTEMPTS = 3


class ServerRestarted(Exception):
    pass


def server_started() -> float | None:
    """When the database server started (seconds since the epoch); None for SQLite."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT extract(epoch FROM pg_postmaster_start_time())")
            return float(cursor.fetchone()[0])
        if connection.vendor == "mysql":
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
            return round(time.time() - int(cursor.fetchone()[1]), -1)  # to within 10 s
    return None


def reconnect(timeout: float = 180.0, then: Callable[[], None] = lambda: None) -> None:
    """Wait until this process's connection works again, then call ``then``."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + timeout
    while True:
        connection.close()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            then()
            return
        except DatabaseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def attempts(
    label: str,
    measure: Callable[[], dict[str, Any]],
    cleanup: Callable[[], None],
    after_reconnect: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """``measure()``, again (after ``cleanup()``) if the server restarted meanwhile or
    the phase failed on a database error; the result records its attempt number."""
    from django.db import DatabaseError

    for attempt in range(1, ATTEMPTS + 1):
        try:
            started = server_started()
            result = measure()
            if server_started() != started:
                raise ServerRestarted("the database server restarted during the phase")
            result["attempt"] = attempt
            return result
        except (DatabaseError, ServerRestarted, RuntimeError, TimeoutError) as exc:
            if attempt == ATTEMPTS:
                raise
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            print(f"  {label}: {first_line}; measuring it again", flush=True)
            cleanup()
            reconnect(then=after_reconnect)
    raise AssertionError("unreachable")


# -- runs --------------------------------------------------------------------------------


def id_floor(at: float | None = None) -> uuid.UUID:
    """The smallest run id (UUIDv7: the high 48 bits are the Unix time in ms) made at or
    after ``at`` (seconds since the epoch; now by default): runs scheduled from now on
    have ids ``>=`` it, so it separates them from older rows such as a history."""
    ms = int((time.time() if at is None else at) * 1000)
    return uuid.UUID(int=(ms & ((1 << 48) - 1)) << 80)


def _runs_since(since: uuid.UUID | None) -> tuple[Any, Any]:
    """(runs, steps) querysets: every row, or those of runs with ids ``>= since``."""
    from everystep.models import Step, Workflow

    if since is None:
        return Workflow.objects.all(), Step.objects.all()
    return Workflow.objects.filter(id__gte=since), Step.objects.filter(workflow_id__gte=since)


def clear_runs(since: uuid.UUID | None = None) -> None:
    """Delete every run and step, or only those of runs with ids ``>= since``."""
    runs, steps = _runs_since(since)
    steps.delete()
    runs.delete()


SCHEDULE_BATCH = 10_000


def schedule_runs(workflow: Callable[..., Any], runs: int) -> None:
    """``runs`` runs of ``workflow(i, 1)``, scheduled in one transaction: the rows
    ``everystep.schedule`` makes, inserted ``SCHEDULE_BATCH`` per statement (fewer where
    the database limits a statement's parameters), and one wake-up (PostgreSQL NOTIFY
    keeps one of identical notifications per transaction anyway)."""
    from django.db import transaction

    from everystep import registry, serde
    from everystep.models import Workflow
    from everystep.store.wake import notify_due

    defn = registry.workflow_def(workflow)
    if defn is None:
        raise TypeError(f"{workflow!r} is not a @workflow function")
    where = f"arguments of workflow {defn.name}"
    with transaction.atomic():
        for first in range(0, runs, SCHEDULE_BATCH):
            batch = [
                Workflow(name=defn.name, args=serde.encode([i, 1], where))
                for i in range(first, min(first + SCHEDULE_BATCH, runs))
            ]
            Workflow.objects.bulk_create(batch, batch_size=SCHEDULE_BATCH)
        notify_due()


def pending_runs() -> int:
    """Runs not finished yet, but for those that sleep (not due: ``schedule_sleeping``)."""
    from django.db.models import Q
    from django.utils import timezone

    from everystep.models import Status, Workflow

    due = Q(status=Status.SCHEDULED, due_at__lte=timezone.now())
    return Workflow.objects.filter(due | Q(status=Status.RUNNING)).count()


def schedule_sleeping(runs: int) -> None:
    """``runs`` runs of ``workflow`` that are due only in a day: runs sleeping or waiting
    in the tables, which a claim must not walk."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from everystep.models import Workflow

    later = timezone.now() + timedelta(days=1)
    with transaction.atomic():
        for first in range(0, runs, SCHEDULE_BATCH):
            batch = [
                Workflow(name="bench.sleeping", args=[i], due_at=later, waiting_for=None)
                for i in range(first, min(first + SCHEDULE_BATCH, runs))
            ]
            Workflow.objects.bulk_create(batch, batch_size=SCHEDULE_BATCH)


def finished_span(since: uuid.UUID | None = None) -> dict[str, Any]:
    """Completed runs and step rows, and runs/s from the first claim (``started_at``) to
    the last ``completed_at``: the same rows measure everystep and the raw limit. Only
    runs with ids ``>= since`` when given (a phase's runs, not a history's)."""
    from django.db.models import Count, Max, Min

    from everystep.models import Status

    runs, steps = _runs_since(since)
    done = runs.filter(status=Status.COMPLETED)
    span = done.aggregate(first=Min("started_at"), last=Max("completed_at"))
    completed, step_rows = done.count(), steps.count()
    seconds = (span["last"] - span["first"]).total_seconds() if completed else math.nan
    return {
        "completed": completed,
        "steps": step_rows,
        "span_s": round(seconds, 3),
        "runs_per_s": round(completed / seconds, 1) if completed else 0.0,
        "statuses": dict(runs.order_by().values_list("status").annotate(n=Count("id"))),
    }


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    every: float,
    alive: Callable[[], None] = lambda: None,
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s")
        time.sleep(every)


# -- CPU and memory ----------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) "


def process_cpu_seconds(pid: int, children: bool = False) -> float:
    """utime + stime of ``pid`` (plus its waited-for children's), in seconds."""
    fields = _stat_fields(pid)  # fields[11] is utime (field 14 of proc(5))
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def process_cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid``."""
    fields = _stat_fields(pid)
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def process_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return math.nan


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def db_server_cpu_seconds(db: str) -> float:
    """CPU seconds of the database server's processes, including exited backends (their
    time is in the parent's cutime/cstime once reaped). 0 for SQLite."""
    names = DB_SERVER_COMMANDS[db]
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() in names:
                total += process_cpu_seconds(int(entry.name), children=True)
        except (OSError, ValueError):
            continue
    return total


def wait_quiet(max_wait: float, threshold: float = 0.25) -> dict[str, Any]:
    """Wait (at most ``max_wait`` seconds) until everything but this process used less
    than ``threshold`` CPUs over one second: on a shared machine, start a phase when
    nobody else is busy. Returns how long it waited and what it last saw."""
    began = time.monotonic()
    while True:
        machine, own = machine_busy_seconds(), process_cpu_seconds(os.getpid())
        time.sleep(1.0)
        others = machine_busy_seconds() - machine - (process_cpu_seconds(os.getpid()) - own)
        waited = time.monotonic() - began
        if others < threshold or waited >= max_wait:
            return {
                "waited_s": round(waited, 1),
                "quiet": others < threshold,
                "other_cpus": round(others, 2),
            }


@dataclass
class CpuMeter:
    """Busy CPU seconds over a phase: the machine, this process, a worker, the database
    server, and the rest (``other_s``: anything else running, a disturbance indicator);
    and the phase's wall time (``wall_s``: busy seconds / ``wall_s`` = CPUs in use)."""

    db: str
    worker_pid: int | None = None
    start: dict[str, float] = field(default_factory=dict)

    def read(self) -> dict[str, float]:
        own = process_cpu_seconds(os.getpid())
        worker = process_cpu_seconds(self.worker_pid) if self.worker_pid else 0.0
        return {
            "wall": time.monotonic(),
            "machine": machine_busy_seconds(),
            "bench": own,
            "worker": worker,
            "db_server": db_server_cpu_seconds(self.db),
        }

    def begin(self) -> None:
        self.start = self.read()

    def end(self) -> dict[str, float]:
        now = self.read()
        d = {k: now[k] - self.start[k] for k in now}
        other = d["machine"] - d["bench"] - d["worker"] - d["db_server"]
        return {
            "bench_s": round(d["bench"], 3),
            "worker_s": round(d["worker"], 3),
            "db_server_s": round(d["db_server"], 3),
            "other_s": round(other, 2),
            "machine_s": round(d["machine"], 2),
            "wall_s": round(d["wall"], 3),
        }


# -- worker subprocesses -------------------------------------------------------------------


def worker_env(source: Path, log_level: str, extra: dict[str, str | None]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") or key.startswith("EVERYSTEP_TEST_")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "EVERYSTEP_TEST_SUBPROCESS": "1",
            "EVERYSTEP_TEST_LOG_LEVEL": log_level,
            "PYTHONPATH": os.pathsep.join([str(source), str(BENCH)]),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class WorkerProcess:
    """One ``manage.py everystep_worker`` of ``source``, logging to its own file."""

    def __init__(
        self,
        source: Path,
        name: str,
        args: list[str],
        log_path: Path,
        *,
        log_level: str = "INFO",
        env: dict[str, str | None] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        command = [sys.executable, str(source / "manage.py"), "everystep_worker", "--name", name]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*command, *args],
                cwd=source,
                env=worker_env(source, log_level, env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker {self.name} exited with {self.proc.returncode}:\n{tail}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until its heartbeat row exists and its CPU use has settled (start-up done)."""
        from everystep.models import Runner

        row = Runner.objects.filter(name=self.name)
        wait_for(row.exists, timeout, 0.05, self.check_alive)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = process_cpu_seconds(self.pid)
            time.sleep(0.3)
            self.check_alive()
            if process_cpu_seconds(self.pid) - before <= 0.03:
                return
        raise TimeoutError(f"worker {self.name} kept busy for {timeout:.0f}s after start")

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def rss_mb(self) -> float:
        return process_rss_mb(self.pid)

    def terminate(self) -> int | None:
        """SIGTERM, then wait for the drain; the exit code, or None if it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def problems(self) -> list[str]:
        """Log lines at WARNING or above, and traceback headers."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        keys = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
        return [f"{self.name}: {line}" for line in lines if any(k in line for k in keys)]


class Workers:
    """Every worker subprocess started, so a ``finally`` can kill them all."""

    def __init__(self, source: Path, log_dir: Path, log_level: str = "INFO") -> None:
        self.source = source
        self.log_dir = log_dir
        self.log_level = log_level
        self.started: list[WorkerProcess] = []

    def start(
        self, name: str, *args: str, env: dict[str, str | None] | None = None
    ) -> WorkerProcess:
        taken = {worker.name for worker in self.started}
        base, number = name, 1
        while name in taken:  # a phase measured again: a name of its own, and its own log
            number += 1
            name = f"{base}-{number}"
        return self._spawn(name, args, f"{name}.log", env)

    def restart(
        self, name: str, *args: str, env: dict[str, str | None] | None = None
    ) -> WorkerProcess:
        """Another process under exactly ``name``, as a supervisor restarts a crashed
        worker (it then resumes the runs parked under that name), with a log of its own."""
        count = sum(1 for worker in self.started if worker.name == name)
        return self._spawn(name, args, f"{name}.{count + 1}.log", env)

    def _spawn(
        self, name: str, args: tuple[str, ...], log: str, env: dict[str, str | None] | None
    ) -> WorkerProcess:
        worker = WorkerProcess(
            self.source, name, list(args), self.log_dir / log, log_level=self.log_level, env=env
        )
        self.started.append(worker)
        return worker

    def problems(self) -> list[str]:
        return [line for worker in self.started for line in worker.problems()]

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()
