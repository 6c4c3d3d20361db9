"""The smoke tier of ``bench/`` (``make bench-smoke``): every bench script runs on the tree
it ships with, at a tiny N, on one database, without waiting for a quiet machine, its
result line written to a temporary directory (never ``bench/results/``). A failure names
the script. The numbers of a smoke run are not figures; nothing here asserts a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# A hang guard, not a target (`make test` runs this tier on two pytest workers, beside the
# integration tier: a script takes longer than it would alone).
TIMEOUT_S = 300
PLAIN_COMMIT = "f9f983c"  # upgrade.py's "plain" migrations (its own default, as a worktree)

# script -> (the result line's kind, its invocations, each given --results DIR); {plans},
# {scratch} and {name} are filled in per test. Each is the smallest mode that leaves the
# machine's shared database servers running: chaos.py on SQLite (it restarts servers),
# netfaults.py's latency scenario (the others put a worker in a network namespace),
# failover.py with the PostgreSQL pair of its own (tests/netfaults/pgpair.py), replicating
# synchronously: asynchronously, a record committed just before the failover may be lost,
# which the bench reports as a broken invariant (a finding, not a smoke failure). History,
# plans and UI scripts write their plans to {plans}.
SMOKE: dict[str, tuple[str, list[str]]] = {
    "async_io.py": ("async_io", [
        "--db sqlite --runs 5 --io 0.05 --sync-pool 2 --async-pool 5 --waiters 5 --hold 0.2"
        " --wait-quiet 0"]),
    "bulk_cancel.py": ("bulk_cancel", ["--db sqlite --runs 50 --batch-size 20"]),
    "chaos.py": ("chaos", [
        "--db sqlite --runs 30 --workers 2 --pool 2 --interval 1 --heartbeat 0.5"
        " --orphan-timeout 2 --db-restarts 0 --pause 0 --drain-timeout 60"]),
    "compare.py": ("compare", ["--db sqlite --runs 20 --repeat 1 --wait-quiet 0"]),
    "failover.py": ("failover", ["--runs 30 --workers 1 --pool 2 --pause 0 --synchronous"]),
    "fanout.py": ("fanout", [
        "--db sqlite --children 10 --workers 1 --pool 2 --wait-quiet 0"]),
    "history.py": ("history", [
        "--db sqlite --history 200 --runs 20 --repeat 1 --plan-repeat 1 --fill-batch 100"
        " --wait-quiet 0 --plans {plans}"]),
    "instructions.py": ("instructions", ["--db sqlite --runs 5 --warm-runs 5"]),
    "netfaults.py": ("netfaults", [
        "--db postgres --scenario latency --runs 10 --singles 2 --rate 10 --wait-quiet 0"]),
    "progress.py": ("progress", [
        "--db sqlite --runs 10 --repeat 1 --publish-workers 1 --publish-pool 1 --publishes 10"
        " --count 20 --parallel 2 --wait-quiet 0"]),
    # PostgreSQL: the rows read come from pg_stat_user_tables.
    "processes.py": ("processes", [
        "--db sqlite --processes 1 2 --runs 10 --pool 2 --repeat 1 --body cpu --wait-quiet 0"]),
    "prune.py": ("prune", ["--db postgres --quick --batch-size 500 --wait-quiet 0"]),
    "rolling_deploy.py": ("rolling_deploy", ["--db sqlite --runs 40 --gap 0.5 --pause 1"]),
    "run.py": ("run", [
        "--db sqlite --runs 10 --workers 1 --pool 2 --samples 2"]),
    "scaling.py": ("scaling", [
        "--db sqlite --workers 1 --runs 10 --idle-seconds 0.5 --wait-quiet 0"]),
    # PostgreSQL: the count at the database (statements_db.py) runs too.
    "statements.py": ("statements", [
        "--db postgres --runs 10 --anatomy-runs 2 --idle-seconds 1 --wait-quiet 0"]),
    "ui_plans.py": ("ui_plans", [
        "--db postgres --database everystep_scale_plans_{name} --runs 12500"
        " --plans {plans}"]),
    "ui_scale.py": ("ui_scale", [
        "--db postgres --database everystep_scale_{name} --runs 2000 generate",
        "--db postgres --database everystep_scale_{name} --requests 1 --plans {plans}"
        " time"]),
    "waiters_held.py": ("waiters_held", ["--quick --hold 0.2 --wait-quiet 0"]),
    "upgrade.py": ("upgrade", [
        "--db postgres --runs 200 --plain-source {scratch}/plain"]),
}  # fmt: skip

# Scripts of bench/ that are no bench: they write no result line.
NOT_BENCHES = {"headline_table.py": "tests/unit/test_bench_readme.py runs it"}


def _scripts() -> set[str]:
    return {
        path.name
        for path in BENCH.glob("*.py")
        if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
    }


def test_every_bench_script_has_a_smoke_run() -> None:
    """Each script of bench/ is in the smoke tier or named as no bench, with its reason."""
    assert _scripts() == set(SMOKE) | set(NOT_BENCHES)


def _run(script: str, flags: str, tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    filled = (flags + " --results {results}").format(
        results=tmp_path / "results", plans=tmp_path / "plans", scratch=tmp_path, name=name
    )
    return subprocess.run(
        [sys.executable, str(BENCH / script), *filled.split()],
        cwd=BENCH.parent,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _plain_source(target: Path) -> None:
    """upgrade.py's old tree as files (``git archive``): no worktree, no git state changed."""
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(BENCH.parent), "archive", PLAIN_COMMIT],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)


def _on_the_servers(script: str) -> pytest.ParameterSet:
    """The script as a parameter, marked with the shared server it uses (PostgreSQL's,
    unless it brings clusters of its own), so no test that stops that server runs beside
    it (tests/exclusive.py)."""
    flags = " ".join(SMOKE[script][1])
    uses_postgres = "--db postgres" in flags or script == "waiters_held.py"
    marks = [pytest.mark.servers("postgres")] if uses_postgres else []
    return pytest.param(script, marks=marks, id=script)


@pytest.mark.parametrize("script", [_on_the_servers(script) for script in sorted(SMOKE)])
def test_bench_script_runs_at_a_tiny_n(script: str, tmp_path: Path) -> None:
    """The script exits 0 and appends its result line to the temporary results directory."""
    kind, invocations = SMOKE[script]
    name = f"smoke_{uuid.uuid4().hex[:8]}"
    if script == "upgrade.py":
        _plain_source(tmp_path / "plain")
    try:
        for flags in invocations:
            done = _run(script, flags, tmp_path, name)
            output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            assert done.returncode == 0, f"{script} {flags} exited {done.returncode}\n{output}"
    finally:
        if script == "ui_scale.py":  # the one script that keeps its database
            _run(script, "--db postgres --database everystep_scale_{name} drop", tmp_path, name)
    lines = (tmp_path / "results" / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(json.loads(line)["kind"] == kind for line in lines)
