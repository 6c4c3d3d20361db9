"""CPU and memory readings from ``/proc``: a process's, the machine's, the database
server's; waiting for a quiet machine; the CPU split of a phase (``CpuMeter``).

Imports nothing of Django or of this project, so the PgQueuer peer's venv can use it."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The database server's processes by name; scaling.py adds PgBouncer's.
DB_SERVER_COMMANDS = {"postgres": {"postgres"}, "mariadb": {"mariadbd", "mysqld"}, "sqlite": set()}


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


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (a worker's processes under ``--processes``)."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


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
    """Busy CPU seconds over a phase: the machine, this process, the worker processes
    (``worker_pids``; user and system apart), the database server, and the rest
    (``other_s``: anything else running, a disturbance indicator); and the phase's wall
    time (``wall_s``: busy seconds / ``wall_s`` = CPUs in use)."""

    db: str
    worker_pids: list[int] = field(default_factory=list)
    start: dict[str, float] = field(default_factory=dict)

    def _workers(self) -> dict[str, float]:
        splits = [process_cpu_split(pid) for pid in self.worker_pids]
        return {
            "worker_user": sum(user for user, _ in splits),
            "worker_system": sum(system for _, system in splits),
        }

    def _rest(self) -> dict[str, float]:
        return {
            "wall": time.monotonic(),
            "machine": machine_busy_seconds(),
            "bench": process_cpu_seconds(os.getpid()),
            "db_server": db_server_cpu_seconds(self.db),
        }

    def begin_workers(self) -> None:
        """Start counting the workers' CPU now, before ``begin``: before the runs are
        scheduled, since the workers may start on them before the scheduling returns."""
        self.start = self._workers()

    def begin(self) -> None:
        self.start = {**self._workers(), **self.start, **self._rest()}

    def end(self) -> dict[str, float]:
        now = {**self._workers(), **self._rest()}
        d = {k: now[k] - self.start[k] for k in now}
        worker = d["worker_user"] + d["worker_system"]
        other = d["machine"] - d["bench"] - worker - d["db_server"]
        spent = {
            "bench_s": round(d["bench"], 3),
            "worker_s": round(worker, 3),
            "db_server_s": round(d["db_server"], 3),
            "other_s": round(other, 2),
            "machine_s": round(d["machine"], 2),
            "wall_s": round(d["wall"], 3),
        }
        if self.worker_pids:
            spent["worker_user_s"] = round(d["worker_user"], 3)
            spent["worker_system_s"] = round(d["worker_system"], 3)
        return spent
