"""A rolling deploy under load: nothing failed, lost or run twice (issue 52).

    .venv/bin/python bench/rolling_deploy.py --db postgres|mariadb|sqlite
        [--runs 2000] [--workers 3] [--pool 8] [--pause 5] [--gap 4] [--source PATH]
        [--label NAME]

On a fresh database of its own (``everystep_test_bench_…``, dropped at the end), with
two code trees written to its scratch folder (``tests/code_trees.py``: the old one lacks
workflow ``deploy.added``; the new one has it and changes ``deploy.kept`` behind
``patched("faster")``): ``--workers`` workers on the old code start; web processes of
both versions schedule ``--runs`` runs (half of them ``deploy.added``, a quarter of
``deploy.kept`` sleeping ``--pause`` seconds, so across the deploy) while each worker in
turn, ``--gap`` seconds apart, gets SIGTERM, drains and is started again on the new code
under its name (``tests/rolling_deploy.py`` says it step by step). Then every run must
end: prints the runs completed, failed and unfinished, the step bodies executed twice
(``Execution`` rows per run and step), the runs an old worker handed back, and the wall
time. Appends one JSON line (``"kind": "rolling_deploy"``) to
``bench/results/rolling_deploy.jsonl``. Correctness under a deploy, not speed: it needs no
quiet machine, but one makes the timings comparable.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from harness import options
from harness.results import print_header
from harness.session import Session, run_benchmark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--runs", type=int, default=2000, help="runs scheduled (2000)")
    parser.add_argument("--workers", type=int, default=3, help="workers replaced (3)")
    parser.add_argument("--pool", type=int, default=8, help="each worker's --pool (8)")
    parser.add_argument("--pause", type=float, default=5.0, help="sleeping runs' sleep, s (5)")
    parser.add_argument("--gap", type=float, default=4.0, help="seconds between replacements (4)")
    parser.add_argument("--timeout", type=float, default=600.0, help="for the end, s (600)")
    args = parser.parse_args(argv)
    if args.runs < 4 or args.workers < 1 or args.pool < 1:
        parser.error("--runs must be at least 4, --workers and --pool at least 1")
    return args


def benchmark(args: argparse.Namespace, run: Session) -> dict[str, Any]:
    from tests.code_trees import make_tree
    from tests.rolling_deploy import roll

    old = make_tree(run.scratch / "old", new=False)
    new = make_tree(run.scratch / "new", new=True)
    outcome = roll(
        old,
        new,
        run.scratch,
        runs=args.runs,
        workers=args.workers,
        pool=args.pool,
        pause=args.pause,
        gap=args.gap,
        timeout=args.timeout,
    )
    return {"outcome": asdict(outcome)}


def report(record: dict[str, Any]) -> None:
    from tests.rolling_deploy import Outcome

    print_header(record)
    outcome = Outcome(**record["outcome"])
    print(f"rolling deploy, {record['args']['workers']} workers old -> new: {outcome.line()}")
    for failure in outcome.failures:
        print(f"  failed: {failure}")
    print(json.dumps({"kind": "rolling_deploy", "db": record["db"], **record["outcome"]}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    code = run_benchmark("rolling_deploy", args, lambda run: benchmark(args, run), report)
    return code


if __name__ == "__main__":
    sys.exit(main())
