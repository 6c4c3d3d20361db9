"""Client instructions per run, counted by valgrind: a hot-path figure that noise cannot move.

On a shared 2-CPU machine the same tree measured 312-406 runs/s from one invocation of
``compare.py`` to the next, and even its CPU seconds per run by up to 30 %: a change worth 5 %
cannot be seen. The number of machine instructions the client executes per run does not
vary (0.3 % between invocations): this script counts them with callgrind, for everystep's
pass and for the raw-SQL limit's client (``harness/raw_limit.py``) on the same database::

    .venv/bin/python bench/instructions.py --db postgres|mariadb|sqlite [--runs 200]
        [--batch 2] [--workload plain|pydantic] [--source PATH] [--label NAME]

Each phase is its own process under ``valgrind --tool=callgrind --instr-atstart=no``
(``apt-get install valgrind``), on a fresh database: 300 runs of the workload warm it
up (imports, prepared statements, caches), then ``--runs`` runs are scheduled and counted
from the first claim to the last outcome, with instrumentation switched on around that
span only (``callgrind_control -i on/off``). The workload (``--workload``) is
``bench_three`` (``plain``, the default) or ``typed_workflows.bench_three_typed``
(``pydantic``: the same 3 steps, each taking and returning a pydantic model, issue 55);
the raw phase runs ``bench_three``'s rows either way. One thread, in-process:

- **everystep**: ``store.claims.claim_due(batch)`` and ``engine.execute.run_pass`` for each run
  claimed, as a worker's loop and pool threads do, with the worker's logging (INFO, to
  a null handler) and metrics, and statements prepared on PostgreSQL (as a worker does on
  a direct connection);
- **raw**: ``raw_limit.run_raw_limit(1, batch)``: the same rows with the bare driver.

What it does not count: the worker's thread pool and claim loop (thread hand-offs,
futures), the database server, and time spent waiting. It is the cost of the code path,
not a throughput; ``compare.py`` gives that. Appends one line to
``bench/results/instructions.jsonl``. ``--source`` works for any tree that has
``everystep/store/claims.py`` (the tree at 07d4a10 and later); ``--workload pydantic``
only for a tree with ``everystep/shapes/`` (9264575 and later). After the counted span
(not counted) every run's stored result is checked against its arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import options, runs
from harness.results import append_result, source_info
from harness.session import session

WARM_RUNS = 300
WORKLOADS = ("plain", "pydantic")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    parser.add_argument("--runs", type=int, default=200, help="runs counted per phase (200)")
    parser.add_argument("--batch", type=int, default=2, help="runs per claim (2)")
    parser.add_argument(
        "--warm-runs", type=int, default=WARM_RUNS, help=f"runs before counting ({WARM_RUNS})"
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="plain",
        help="bench_three (plain) or bench_three_typed, a pydantic model per step (plain)",
    )
    parser.add_argument("--inner", choices=["everystep", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.batch < 1:
        parser.error("--runs and --batch must be at least 1")
    if args.workload == "pydantic" and not (args.source / "everystep" / "shapes").is_dir():
        parser.error(f"--workload pydantic: {args.source} has no typed values (issue 55)")
    if args.inner:
        return inner(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    scratch = Path(tempfile.mkdtemp(prefix="everystep-instructions-"))
    try:
        phases = {phase: counted(args, phase, scratch) for phase in ("everystep", "raw")}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mine, raw = phases["everystep"], phases["raw"]
    record = {
        "kind": "instructions",
        "db": args.db,
        "label": args.label,
        "args": {
            "runs": args.runs,
            "batch": args.batch,
            "warm_runs": args.warm_runs,
            "workload": args.workload,
            "source": str(args.source),
        },
        **{k: mine[k] for k in ("source", "machine")},
        "everystep_instructions_per_run": mine["per_run"],
        "raw_instructions_per_run": raw["per_run"],
        "ratio_to_raw": round(mine["per_run"] / raw["per_run"], 3),
    }
    info = record["machine"]
    print(
        f"{info['db_version']}; source {record['source']['path']} "
        f"({record['source']['commit']}{', dirty' if record['source']['dirty'] else ''}), "
        f"label {args.label}; {args.runs} runs of {WORKFLOWS[args.workload]}, "
        f"{args.batch} per claim, "
        "one thread, client instructions per run (callgrind):"
    )
    print(f"  everystep {mine['per_run'] / 1e6:8.3f} M")
    print(f"  raw limit {raw['per_run'] / 1e6:8.3f} M   everystep / raw {record['ratio_to_raw']}")
    append_result(record, args.results)
    return 0


def counted(args: argparse.Namespace, phase: str, scratch: Path) -> dict[str, Any]:
    """Run ``phase`` in a process of its own under callgrind; its count and report."""
    out, report = scratch / f"{phase}.callgrind", scratch / f"{phase}.json"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(Path(__file__).resolve()),
        *("--db", args.db, "--source", str(args.source), "--label", args.label),
        *("--runs", str(args.runs), "--batch", str(args.batch)),
        *("--warm-runs", str(args.warm_runs), "--workload", args.workload),
        *("--inner", phase, "--report", str(report)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not report.exists():
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {phase} phase failed (exit {done.returncode})")
    result = json.loads(report.read_text(encoding="utf-8"))
    result["per_run"] = round(total_instructions(out) / result["runs"])
    return result


def total_instructions(out: Path) -> int:
    """The ``totals:`` line of a callgrind output file (its ``summary:`` line, written
    before instrumentation was switched on, says 0)."""
    for line in out.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def inner(args: argparse.Namespace) -> int:
    """Under callgrind: warm up, then count ``args.runs`` runs of ``args.inner``."""
    with session(args, f"everystep-instructions-{args.inner}-") as current:
        from django.conf import settings

        settings.EVERYSTEP_PREPARED_STATEMENTS = True  # a worker's direct connection
        quiet = logging.getLogger("everystep")
        quiet.handlers[:] = [logging.NullHandler()]
        quiet.setLevel(logging.INFO)
        quiet.propagate = False
        execute = execute_raw if args.inner == "raw" else execute_everystep
        workload = "plain" if args.inner == "raw" else args.workload
        schedule, expected = WORKLOAD_SETUP[workload]()
        schedule(args.warm_runs)
        execute(args.batch)
        runs.clear_runs()
        schedule(args.runs)
        instrument("on")
        executed = execute(args.batch)
        instrument("off")
        if executed != args.runs:
            raise SystemExit(f"{executed} runs executed, {args.runs} scheduled")
        check_results(expected)
        report = {
            "runs": executed,
            "source": source_info(args.source),
            "machine": current.info,
        }
        args.report.write_text(json.dumps(report), encoding="utf-8")
    return 0


def instrument(state: str) -> None:
    subprocess.run(
        ["callgrind_control", "--instr=" + state, str(os.getpid())],
        check=True,
        capture_output=True,
    )


def plain_workload() -> tuple[Callable[[int], None], Callable[[Any], Any]]:
    """Scheduling ``runs`` runs of ``bench_three(i, 1)``, and the result stored for a
    run's stored arguments."""
    from everystep_bench.workflows import bench_three

    return (
        lambda count: runs.schedule_runs(bench_three, count),
        lambda args: 2 * (args[0] + args[1]) + 1,
    )


def pydantic_workload() -> tuple[Callable[[int], None], Callable[[Any], Any]]:
    """The same for ``bench_three_typed`` (its module imported only here: pydantic)."""
    from everystep_bench import typed_workflows

    def schedule(count: int) -> None:
        runs.schedule_runs(typed_workflows.bench_three_typed, count, typed_workflows.arguments)

    def expected(args: Any) -> Any:
        a, b = args
        return {"value": 2 * (a["value"] + b["value"]) + 1, "note": a["note"]}

    return schedule, expected


WORKLOAD_SETUP = {"plain": plain_workload, "pydantic": pydantic_workload}
WORKFLOWS = {"plain": "bench_three", "pydantic": "bench_three_typed"}


def check_results(expected: Callable[[Any], Any]) -> None:
    """Every run's stored result is what its stored arguments give (after the count)."""
    from everystep.models import Workflow

    for run_id, args, result in Workflow.objects.values_list("id", "args", "result"):
        if result != expected(args):
            raise SystemExit(f"run {run_id}: result {result!r} for arguments {args!r}")


def execute_everystep(batch: int) -> int:
    from everystep.engine.execute import run_pass
    from everystep.store.claims import claim_due

    executed = 0
    while claimed := claim_due("instructions", batch):
        for held in claimed:
            outcome = run_pass(held)
            if outcome.status != "completed":
                raise SystemExit(f"run {held.run_id}: {outcome}")
            executed += 1
    return executed


def execute_raw(batch: int) -> int:
    from harness.raw_limit import run_raw_limit

    return run_raw_limit(1, batch).runs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
