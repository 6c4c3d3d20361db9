"""What a benchmark run leaves behind: one JSON line in ``bench/results/<kind>.jsonl``
(what was measured, with what, where), and the header and footer of its printed report."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def append_result(record: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Append ``record`` to ``<directory>/<its kind>.jsonl`` (``bench/results/`` by
    default); that file."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{record['kind']}.jsonl"
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
    return target


def source_info(source: Path) -> dict[str, Any]:
    """The tree measured: its path, where ``everystep`` came from, its commit."""
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
    """The date, the machine and its load now, and the database server's version."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "db_version": database_version(),
        "loadavg_start": loadavg(),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def plain_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options as JSON can hold them (paths as text), but ``--keep-logs``."""
    return {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "keep_logs"
    }


def result_record(
    kind: str,
    args: argparse.Namespace,
    info: dict[str, Any],
    complaints: list[str],
    **parts: Any,
) -> dict[str, Any]:
    """One result line: what was measured, with what, where, and the workers' complaints
    (kept as ``worker_problems``); ``info`` is ``machine_info()`` from the start. Call
    while Django is set up on the benchmark database. A part may be named ``problems``
    (``chaos.py``'s broken invariants)."""
    info["loadavg_end"] = loadavg()
    return {
        "kind": kind,
        "db": args.db,
        "label": args.label,
        "args": plain_args(args),
        "source": source_info(args.source),
        "machine": info,
        **parts,
        "worker_problems": complaints,
    }


def print_header(record: dict[str, Any]) -> None:
    """The first line of a report: database, machine, load, the source measured."""
    info, source = record["machine"], record["source"]
    print(
        f"\n{info['db_version']}, {info['nproc']} CPUs, load {info['loadavg_start']} -> "
        f"{info.get('loadavg_end')}; source {source['path']} "
        f"({source['commit']}{', dirty' if source['dirty'] else ''}), label {record['label']}"
    )


def print_problems(record: dict[str, Any]) -> None:
    """The last lines of a report: the workers' log lines at WARNING or above."""
    problems = record["worker_problems"]
    print(f"worker log lines at WARNING or above: {len(problems)}")
    for line in problems[:10]:
        print(f"  {line}")
