"""py-spy attached to a worker (``Profiler``), and its ``--format raw`` samples
summarised as plain text (``write_report``; ``compare.py --profile``).

Recorded with ``--gil``, py-spy samples only the thread holding the GIL, so the samples
split the worker's Python CPU time; time in C with the GIL released (waiting for the
database; SQLite's own work, which runs in the worker) is not sampled, and the header
compares sampled seconds with the worker's measured CPU (coverage). The report gives,
with each share also as milliseconds of worker CPU per run (share x the phase's
measured CPU per run):

- by thread role: pool (the passes), loop (claims and polls), heartbeat, listener;
- self time by layer: Django's ORM, Django's database layer, the driver, everystep, the
  rest of Django, the step bodies, the standard library;
- self time by code area (the directory of the innermost Python frame; time in C,
  a driver's or the interpreter's, counts for the Python frame that called it);
- everystep's own functions by inclusive time (what each engine operation costs);
- the top functions by self time and by inclusive time.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class Profiler:
    """``py-spy record --gil`` attached to ``pid`` until ``stop()``, its raw samples
    written to ``output`` (``.venv/bin/pip install py-spy``)."""

    def __init__(self, pid: int, output: Path, rate: int) -> None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        command = [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
        # --gil: only the thread holding the GIL is sampled, so the samples split the
        # worker's Python CPU time; threads waiting on the database (which py-spy would
        # otherwise often count as active) are left out.
        command += ["--output", str(output), "--gil"]
        self.spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attached
        if self.spy.poll() is not None:
            error = self.spy.stderr.read().decode() if self.spy.stderr else ""
            raise RuntimeError(f"py-spy exited: {error}")

    def stop(self) -> None:
        self.spy.send_signal(signal.SIGINT)
        try:
            self.spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.spy.kill()
            self.spy.wait()


FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")
ROLES = (  # the first role whose function is on the stack
    ("pool", ("_worker (concurrent/futures/thread.py)",)),
    ("heartbeat", ("Heartbeat.run",)),
    ("listener", ("Listener.run",)),
    ("loop", ("Worker.run", "<module> (manage.py)")),
)
TOP_SELF = 25
TOP_INCLUSIVE = 40
TOP_EVERYSTEP = 25
LAYERS = (  # the first whose prefix the innermost frame's file has
    ("Django ORM: building, compiling, iterating queries", ("django/db/models/",)),
    (
        "Django database layer: backends, cursors, transactions",
        ("django/db/backends/", "django/db/utils.py", "django/db/transaction.py", "django/db/__"),
    ),
    ("driver", ("psycopg", "MySQLdb/", "sqlite3/")),
    ("everystep", ("everystep/",)),
    ("Django, other (utils, signals, settings)", ("django/",)),
    ("the workflow's step bodies", ("everystep_bench/",)),
)


def parse(path: Path) -> list[tuple[list[str], int]]:
    """``(frames root first, samples)`` per distinct stack."""
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def function_of(frame: str) -> str:
    """``func (file)``: the frame without its line number."""
    match = FRAME.match(frame)
    return f"{match['func']} ({match['file']})" if match else frame


def area_of(frame: str) -> str:
    match = FRAME.match(frame)
    if not match:
        return frame
    parts = match["file"].split("/")
    if len(parts) == 1:
        return parts[0].removesuffix(".py")
    return "/".join(parts[:-1][:4])


def layer_of(frame: str) -> str:
    match = FRAME.match(frame)
    path = match["file"] if match else frame
    for layer, prefixes in LAYERS:
        if path.startswith(prefixes):
            return layer
    return "Python standard library and other"


def role_of(frames: list[str]) -> str:
    names = [function_of(frame) for frame in frames]
    for role, markers in ROLES:
        if any(name.startswith(marker) for name in names for marker in markers):
            return role
    return "other"


def analyse(stacks: list[tuple[list[str], int]]) -> dict[str, Any]:
    total = sum(n for _, n in stacks)
    roles: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    selfs: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, n in stacks:
        roles[role_of(frames)] += n
        layers[layer_of(frames[-1])] += n
        areas[area_of(frames[-1])] += n
        selfs[function_of(frames[-1])] += n
        for name in {function_of(frame) for frame in frames}:
            inclusive[name] += n
    return {
        "samples": total,
        "roles": roles.most_common(),
        "layers": layers.most_common(),
        "areas": areas.most_common(15),
        "self": selfs.most_common(TOP_SELF),
        "everystep": [
            (name, n)
            for name, n in inclusive.most_common()
            if "(everystep/" in name or "(everystep_bench/" in name
        ][:TOP_EVERYSTEP],
        "inclusive": inclusive.most_common(TOP_INCLUSIVE),
    }


def render(
    result: dict[str, Any],
    cpu_ms_per_run: float | None,
    title: str,
    coverage: str = "",
) -> str:
    total = max(result["samples"], 1)

    def rows(pairs: list[tuple[str, int]]) -> list[str]:
        out = []
        for name, n in pairs:
            share = n / total
            ms = f"{share * cpu_ms_per_run:7.3f}" if cpu_ms_per_run else "      -"
            out.append(f"  {100 * share:5.1f}%  {ms}  {name}")
        return out

    lines = [title, ""]
    lines.append(f"{result['samples']} samples of the thread holding the GIL{coverage}")
    if cpu_ms_per_run:
        lines.append(f"worker CPU in this phase: {cpu_ms_per_run:.3f} ms per run")
    lines.append("columns: share of samples, worker CPU ms per run, what")
    for heading, key in (
        ("By thread role", "roles"),
        ("Self time by layer (innermost Python frame)", "layers"),
        ("Self time by code area (innermost Python frame's directory)", "areas"),
        (f"Top {TOP_EVERYSTEP} everystep functions by inclusive time", "everystep"),
        (f"Top {TOP_SELF} functions by self time", "self"),
        (f"Top {TOP_INCLUSIVE} functions by inclusive time", "inclusive"),
    ):
        lines += ["", heading, *rows(result[key])]
    return "\n".join(lines) + "\n"


def write_report(
    collapsed: Path,
    target: Path,
    phase: dict[str, Any],
    title: str,
    argv: list[str],
    rate: int,
) -> dict[str, Any]:
    """Write the text report of ``collapsed`` for an ``everystep_phase`` result."""
    result = analyse(parse(collapsed))
    cpu = float(phase["worker_cpu_ms_per_run"])
    sampled = result["samples"] / rate
    worker_s = float(phase["cpu"]["worker_s"])
    user, system = phase["cpu"].get("worker_user_s"), phase["cpu"].get("worker_system_s")
    coverage = (
        f" ({sampled:.2f} s at {rate}/s; the worker used {worker_s:.2f} s of CPU, "
        f"{user} s user + {system} s system: coverage {100 * sampled / worker_s:.0f}%)"
        if worker_s
        else ""
    )
    header = (
        f"{title}\n{datetime.now(UTC).isoformat(timespec='seconds')}; command: "
        f"{' '.join(argv)}\nthis phase: {phase['runs_per_s']} runs/s under py-spy (not a "
        f"throughput figure), {phase['worker_cpu_ms_per_step']} ms worker CPU per step"
    )
    target.write_text(render(result, cpu, header, coverage), encoding="utf-8")
    return {
        "file": str(target),
        "samples": result["samples"],
        "sampled_s": round(sampled, 2),
        "roles": result["roles"],
        "layers": result["layers"],
        "areas": result["areas"],
        "everystep_top15": result["everystep"][:15],
        "self_top10": result["self"][:10],
        "inclusive_top15": result["inclusive"][:15],
    }
