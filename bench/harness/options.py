"""The command-line options the benchmark scripts share, spelled once."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.results import RESULTS
from harness.session import ROOT

DATABASES = ("postgres", "mariadb", "sqlite")
SETTINGS_VALUE = "settings"  # --conn-max-age: keep tests/settings.py's value


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--db``, ``--source`` (the tree measured) and ``--label`` (names the result line)."""
    parser.add_argument("--db", choices=DATABASES, required=True)
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
    add_results_argument(parser)


def add_results_argument(parser: argparse.ArgumentParser) -> None:
    """``--results DIR``: where the result line goes (a smoke run's: elsewhere)."""
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        metavar="DIR",
        help="append the result line to DIR/<kind>.jsonl (bench/results)",
    )


def add_wait_quiet_argument(parser: argparse.ArgumentParser, before_each: str) -> None:
    """``--wait-quiet``: seconds to wait before each ``before_each`` for a quiet machine."""
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=60,
        help=f"before each {before_each}, wait up to this many seconds for the rest of the "
        "machine to use < 0.25 CPU (60; 0 = do not wait)",
    )


def add_worker_phase_arguments(parser: argparse.ArgumentParser) -> None:
    """How a phase that starts worker processes waits for a quiet machine and keeps the
    workers' logs: ``--wait-quiet``, ``--log-level``, ``--keep-logs``."""
    add_wait_quiet_argument(parser, "phase")
    parser.add_argument("--log-level", default="INFO", help="worker log level (INFO)")
    parser.add_argument("--keep-logs", action="store_true", help="keep worker logs")


def add_conn_max_age_argument(parser: argparse.ArgumentParser) -> None:
    """``--conn-max-age``: one worker phase per value."""
    parser.add_argument(
        "--conn-max-age",
        nargs="+",
        default=[SETTINGS_VALUE],
        metavar="SECONDS",
        help="CONN_MAX_AGE values to run the worker with: integers, 'none' (unlimited) or "
        "'settings' (keep tests/settings.py's); several give one phase each (settings)",
    )


def check_conn_max_age(parser: argparse.ArgumentParser, values: list[str]) -> None:
    for value in values:
        if value not in (SETTINGS_VALUE, "none") and not value.isdigit():
            parser.error(f"--conn-max-age: {value!r} is not an integer, 'none' or 'settings'")


def conn_max_age_env(value: str) -> dict[str, str | None]:
    """The worker environment for one ``--conn-max-age`` value (read by the settings)."""
    return {"EVERYSTEP_TEST_CONN_MAX_AGE": None if value == SETTINGS_VALUE else value}


def add_phase_arguments(
    parser: argparse.ArgumentParser, runs: int = 500, workers: list[int] | None = None
) -> None:
    """The options ``phases.everystep_phase`` and ``phases.raw_phase`` read;
    ``workers``: ``--workers`` takes a list with this default (one phase per value)."""
    parser.add_argument("--runs", type=int, default=runs, help=f"runs per phase ({runs})")
    parser.add_argument("--pool", type=int, default=8, help="worker --pool (8)")
    parser.add_argument("--poll", type=float, default=0.05, help="worker --poll (0.05)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+" if workers else None,
        default=workers or 1,
        help="worker processes per everystep phase, named apart; the raw limit runs "
        f"workers x pool threads ({' '.join(map(str, workers or [1]))})",
    )
    parser.add_argument("--raw-batch", type=int, default=1, help="runs per raw claim (1)")
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy samples/s (250)")
    add_worker_phase_arguments(parser)


def check_phase_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    fleets = args.workers if isinstance(args.workers, list) else [args.workers]
    if min(args.runs, args.pool, *fleets, args.raw_batch) < 1:
        parser.error("--runs, --pool, --workers and --raw-batch must be at least 1")
