"""Network faults between workers and their database (issue 37), at scale: latency, random
resets, and a chaos run with a 60 s blackhole; ``tests/netfaults/test_network_chaos.py``
is the short version.

    .venv/bin/python bench/netfaults.py --db postgres|mariadb
        [--scenario latency|resets|chaos ...] [--runs N] [--workers 3] [--pool 4]
        [--latency-pool 8] [--singles 60] [--rate 2] [--reset-rate 0.001]
        [--blackhole 60] [--pause S] [--wait-quiet 60] [--keep-logs]

The workers reach the database through a TCP proxy in this process
(``tests/netfaults/proxy.py``; but in the first latency phase); on a fresh database of its
own, one scenario after another (all three by default):

- **latency**: one ``--latency-pool`` worker executes ``--runs`` (500) runs of
  ``bench_three`` (3 one-line steps, as ``compare.py``) scheduled at once, then
  ``--singles`` runs scheduled one at a time, ``--rate`` a second; first straight to the
  database (another worker process, the proxy's own cost), then through the proxy with
  nothing added, then with 200 ms added to every round trip (100 ms each way), the same
  worker process. Per phase: runs/s (completed runs over first claim to last completion,
  from the rows), and p50/p99 of schedule -> completed for the batch (the queue included),
  of claim -> completed for the batch (a run's own time), and of schedule -> completed
  for the single runs (no queue);
- **resets**: ``--workers`` workers x ``--pool`` run ``--runs`` (2,000) runs of the chaos
  mix (``tests/testapp/chaos.py``, steps sleep ``--pause``, 0) through the proxy with a
  small delay and jitter and ``--reset-rate`` (the chance per chunk that its connection
  is reset); every reset is a restart interruption of its own moment (``ResetWatch``);
- **chaos**: the same faults, ``--runs`` (2,000) runs of the mix (``--pause`` 0.02), and
  one worker in a network namespace (``tests/netfaults/netns.py``, through a proxy of its
  own) blackholed for ``--blackhole`` seconds (and at least until its runs were taken
  over) once a fifth of the runs are done, the fault ending as a NAT that lost its
  state ends it; a quarter more runs are scheduled after it, which the victim shares.

After resets and chaos: the chaos checks (every run terminal with its known outcome, none
lost, no step recorded twice, every re-execution in flight at a fault), the blocked runs
settled with their known charge (they must then complete), and SIGTERM (every worker must
exit 0). A failover is ``bench/failover.py`` (PostgreSQL). Prints a report per scenario,
appends one JSON line per scenario (``"kind": "netfaults"``) to
``bench/results/netfaults.jsonl``, and exits 1 if an invariant did not hold. Needs root
(namespaces, iptables).
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from harness import options, runs
from harness.cpu import CpuMeter, wait_quiet
from harness.results import append_result, print_header, result_record
from harness.session import Session, session
from harness.workers import WorkerProcess, worker_env

SCENARIOS = ("latency", "resets", "chaos")
DEFAULT_RUNS = {"latency": 500, "resets": 2000, "chaos": 2000}
DEFAULT_PAUSE = {"resets": 0.0, "chaos": 0.02}
SMALL_DELAY, SMALL_JITTER = 0.002, 0.003  # seconds each way, per chunk, in resets and chaos
ROUND_TRIP = 0.2
CHAOS_FLAGS = ("--poll", "0.05", "--heartbeat", "1", "--orphan-timeout", "8")
CHAOS_FLAGS += ("--network-timeout", "6")
BOUND = 900.0  # seconds a scenario's runs may take to be terminal


def wait(
    predicate: Callable[[], bool], what: str, alive: list[Any], timeout: float = BOUND
) -> None:
    """Until ``predicate()``; a worker that exited meanwhile ends the bench."""
    deadline = time.monotonic() + timeout
    while not predicate():
        for worker in alive:
            if worker.proc.poll() is not None:
                raise SystemExit(f"worker {worker.name} exited waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


# -- latency ------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile, in milliseconds."""
    ordered = sorted(values)
    return round(1000 * ordered[max(math.ceil(q * len(ordered)) - 1, 0)], 1)


def spread(ids: tuple[Any, Any], start: str) -> dict[str, float]:
    """p50/p99 of ``start`` -> ``completed_at`` over the runs with ids in ``ids`` (from,
    to: ``runs.id_floor``s)."""
    from everystep.models import Workflow

    rows = Workflow.objects.filter(id__gte=ids[0], id__lt=ids[1], status="completed")
    seconds = [
        (done - begun).total_seconds() for begun, done in rows.values_list(start, "completed_at")
    ]
    return {"p50_ms": quantile(seconds, 0.5), "p99_ms": quantile(seconds, 0.99), "n": len(seconds)}


def latency_phase(args: argparse.Namespace, label: str, worker: WorkerProcess) -> dict[str, Any]:
    """``args.runs`` runs at once, then ``args.singles`` one at a time."""
    from everystep_bench.workflows import bench_three

    from everystep import schedule

    runs.tidy_tables(args.db)
    quiet = wait_quiet(args.wait_quiet)
    meter = CpuMeter(args.db, [worker.pid])
    meter.begin_workers()
    meter.begin()
    batch = runs.id_floor()
    runs.schedule_runs(bench_three, args.runs)
    wait(lambda: runs.pending_runs() == 0, f"{label}: the batch", [worker])
    cpu = meter.end()
    span = runs.finished_span()
    singles = runs.id_floor()
    for number in range(args.singles):
        schedule(bench_three, number, 1)
        time.sleep(1 / args.rate)
    wait(lambda: runs.pending_runs() == 0, f"{label}: the single runs", [worker])
    end = runs.id_floor(time.time() + 1)
    return {
        "phase": label,
        "completed": span["completed"],
        "runs_per_s": span["runs_per_s"],
        "batch_schedule_to_done": spread((batch, singles), "created_at"),
        "batch_claim_to_done": spread((batch, singles), "started_at"),
        "single_schedule_to_done": spread((singles, end), "created_at"),
        "cpu": cpu,
        "quiet": quiet,
    }


def latency(args: argparse.Namespace, current: Session) -> dict[str, Any]:
    from tests.netfaults.proxy import Proxy
    from tests.netfaults.test_network_chaos import proxy_env, upstream

    flags = ("--pool", str(args.latency_pool), "--poll", "0.05")
    direct = current.workers.start_fleet("direct", 1, *flags)[0]
    phases = [latency_phase(args, "direct", direct)]
    direct.terminate()
    with Proxy(upstream()) as proxy:
        proxied = current.workers.start_fleet("proxied", 1, *flags, env=proxy_env(proxy.address))[0]
        phases.append(latency_phase(args, "proxy, +0 ms", proxied))
        proxy.set_faults(delay=ROUND_TRIP / 2)
        phases.append(latency_phase(args, f"proxy, +{1000 * ROUND_TRIP:.0f} ms", proxied))
        exit_code = proxied.terminate()
    return {"phases": phases, "problems": [] if exit_code == 0 else [f"exit {exit_code}"]}


def report_latency(record: dict[str, Any]) -> None:
    a = record["args"]
    print(
        f"latency: {a['runs']} runs of bench_three at once, then {a['singles']} single runs "
        f"at {a['rate']:g}/s; one worker, --pool {a['latency_pool']}"
    )
    print(
        f"  {'phase':<18}{'runs/s':>8}  {'batch sched->done':>19}  {'batch claim->done':>19}  "
        f"{'single sched->done':>19}  {'other CPU s':>11}"
    )
    for p in record["phases"]:
        cells = [
            p[key]
            for key in ("batch_schedule_to_done", "batch_claim_to_done", "single_schedule_to_done")
        ]
        shown = "  ".join(f"{c['p50_ms']:>8.0f} /{c['p99_ms']:>7.0f} ms" for c in cells)
        print(f"  {p['phase']:<18}{p['runs_per_s']:>8.1f}  {shown}  {p['cpu']['other_s']:>11.2f}")
    print("  (p50 / p99)")


# -- resets and chaos -------------------------------------------------------------------------


def clear_chaos() -> None:
    from tests.testapp.models import ChaosEffect

    runs.clear_runs()
    ChaosEffect.objects.all().delete()


def outcome(events: list[Any], alive: list[Any]) -> dict[str, Any]:
    """The chaos checks, then the blocked runs settled (they must complete), checked again."""
    from everystep.models import Workflow
    from tests.testapp import chaos, chaos_checks

    figures = chaos_checks.analyse(events)
    settled = chaos.settle_blocked()
    done = Workflow.objects.filter(id__in=settled, status="completed")
    wait(lambda: done.count() == len(settled), "the settled runs", alive, 300)
    after = chaos_checks.analyse(events)
    found = chaos_checks.problems(figures)
    found += [f"after settling: {problem}" for problem in chaos_checks.problems(after)]
    return {"figures": figures, "settled": len(settled), "problems": found}


def faulty(proxy: Any, args: argparse.Namespace) -> Any:
    proxy.set_faults(delay=SMALL_DELAY, jitter=SMALL_JITTER, reset_rate=args.reset_rate)
    return proxy


def resets(args: argparse.Namespace, current: Session) -> dict[str, Any]:
    from tests.netfaults.proxy import Proxy
    from tests.netfaults.test_network_chaos import ResetWatch, proxy_env, upstream
    from tests.testapp import chaos

    clear_chaos()
    quiet = wait_quiet(args.wait_quiet)
    flags = ("--pool", str(args.pool), *CHAOS_FLAGS)
    with Proxy(upstream()) as proxy, ResetWatch(faulty(proxy, args)) as watch:
        env = proxy_env(proxy.address)
        fleet = [current.workers.start(f"resets-{n}", *flags, env=env) for n in range(args.workers)]
        began = time.monotonic()
        chaos.schedule_mix(args.runs, args.pause)
        wait(lambda: chaos.terminal_count() == args.runs, "every run terminal", fleet)
        took = time.monotonic() - began
        result = outcome(watch.interruptions(), fleet)
        exits = [worker.terminate() for worker in fleet]
    if any(code != 0 for code in exits):
        result["problems"].append(f"exit codes after SIGTERM: {exits}")
    return {
        **result,
        "resets": watch.resets,
        "connections": proxy.stats["accepted"],
        "terminal_s": round(took, 1),
        "exit_codes": exits,
        "quiet": quiet,
    }


def victim_steps_after(victim: Any, moment: float) -> int:
    from datetime import UTC, datetime

    from tests.testapp.models import ChaosEffect

    after = datetime.fromtimestamp(moment, UTC)
    return ChaosEffect.objects.filter(pid=victim.pid, began_at__gt=after).count()


def chaos_run(args: argparse.Namespace, current: Session) -> dict[str, Any]:
    from tests.netfaults.netns import namespace
    from tests.netfaults.proxy import Proxy
    from tests.netfaults.test_network_chaos import ResetWatch, proxy_env, upstream

    clear_chaos()
    quiet = wait_quiet(args.wait_quiet)
    flags = ("--pool", str(args.pool), *CHAOS_FLAGS)
    with namespace() as ns, Proxy(upstream()) as proxy, Proxy(upstream(), (ns.host_ip, 0)) as cut:
        cut.client_timeout = 5.0  # the server ends the blackholed sessions soon after
        with ResetWatch(faulty(proxy, args), faulty(cut, args)) as watch:
            env = proxy_env(proxy.address)
            fleet = [
                current.workers.start(f"chaos-{n}", *flags, env=env)
                for n in range(args.workers - 1)
            ]
            victim = start_victim(args, current, flags, ns.wrap(), proxy_env(cut.address))
            try:
                result = chaos_phases(args, ns, fleet, victim, watch)
                exits = [worker.terminate() for worker in fleet]
                victim.signal(signal.SIGTERM)
                exits.append(victim.wait(60))
            finally:
                victim.kill()  # not one of the session's workers: its kill_all misses it
    if any(code != 0 for code in exits):
        result["problems"].append(f"exit codes after SIGTERM: {exits}")
    return {
        **result,
        "resets": watch.resets,
        "connections": proxy.stats["accepted"] + cut.stats["accepted"],
        "exit_codes": exits,
        "victim_problems": log_problems(victim.log_path),
        "quiet": quiet,
    }


def start_victim(
    args: argparse.Namespace,
    current: Session,
    flags: tuple[str, ...],
    wrap: list[str],
    env: dict[str, str],
) -> Any:
    """The worker in the namespace: the acceptance tier's worker process, which takes a
    command to run under (the session's workers do not), with the session's environment."""
    from tests.acceptance.conftest import WorkerProcess as WrappedWorker

    victim_env = worker_env(args.source, "INFO", dict(env))
    log = current.scratch / "victim.log"
    return WrappedWorker("victim", list(flags), log, env=victim_env, wrap=wrap)


def chaos_phases(
    args: argparse.Namespace, ns: Any, fleet: list[Any], victim: Any, watch: Any
) -> dict[str, Any]:
    """The runs, the blackhole once a fifth are done, a quarter more after it; the checks."""
    from tests.netfaults import test_network_chaos
    from tests.testapp import chaos

    alive = [*fleet, victim]
    began = time.monotonic()
    chaos.schedule_mix(args.runs, args.pause)
    wait(lambda: chaos.terminal_count() >= args.runs // 5, "a fifth of the runs", alive)
    hole = test_network_chaos.hole(ns, victim, at_least=args.blackhole)
    event, figures = hole.event, hole.figures()
    more = args.runs // 4
    chaos.schedule_mix(more, args.pause, first=args.runs)
    wait(lambda: chaos.terminal_count() == args.runs + more, "every run terminal", alive)
    took = time.monotonic() - began
    result = outcome([*watch.interruptions(), event], alive)
    figures["victim_steps_after"] = victim_steps_after(victim, event.end)
    return {**result, "blackhole": figures, "terminal_s": round(took, 1)}


def log_problems(path: Any) -> list[str]:
    """A log's lines at WARNING or above, as ``WorkerProcess.problems`` reads them."""
    keys = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
    lines = path.read_text(errors="replace").splitlines()
    return [f"victim: {line}" for line in lines if any(key in line for key in keys)]


def faults_only(lines: list[str]) -> list[str]:
    """The workers' complaints but the chaos mix's own failures (every ``chaos.failing``
    run logs its ``ValueError`` with a traceback)."""
    return [line for line in lines if "chaos failure" not in line and "Traceback" not in line]


def by_message(lines: list[str], top: int = 12) -> dict[str, int]:
    """Log lines by message, ids and numbers blanked."""
    counts: Counter[str] = Counter()
    for line in lines:
        message = line.split(" ", 5)[-1]  # after "name: date time pid LEVEL"
        counts[re.sub(r"[0-9a-f-]{32,36}|\d+(\.\d+)?", "#", message)[:110]] += 1
    return dict(counts.most_common(top))


def report_chaos(record: dict[str, Any]) -> None:
    a, f = record["args"], record["figures"]
    print(
        f"{record['scenario']}: {f['runs']} runs of the chaos mix, {a['workers']} workers x pool "
        f"{a['pool']}, steps sleep {1000 * a['pause']:g} ms; delay {1000 * SMALL_DELAY:g} ms + "
        f"0-{1000 * SMALL_JITTER:g} ms each way, reset rate {a['reset_rate']:g} per chunk"
    )
    hole = record.get("blackhole")
    rows = [
        ("resets", f"{record['resets']} over {record['connections']} connections"),
        (
            "runs terminal",
            f"{f['terminal']} / {f['runs']} in {record['terminal_s']}s  {f['statuses']}",
        ),
        ("wrong / lost", f"{f['wrong']} / {f['lost']}"),
        ("steps recorded twice", f"{f['recorded_twice']}"),
        (
            "re-executions",
            f"{f['re_executions']} of {f['executions']} executions; in flight at a fault "
            f"{f['in_flight_interrupted']}; unexplained {f['re_executions_unexplained']}",
        ),
        (
            "blocked",
            f"{f['blocked']} (unsafe steps caught {f['unsafe_interrupted']}); settled "
            f"{record['settled']}, unsafe bodies run twice {f['unsafe_executed_twice']}",
        ),
        ("exit codes (SIGTERM)", f"{record['exit_codes']}"),
    ]
    if hole:
        rows.insert(1, ("blackhole", f"{hole}"))
    for label, value in rows:
        print(f"  {label:<22}{value}")
    for line in [
        line
        for key in ("wrong_examples", "lost_examples", "unexplained_examples")
        for line in f[key]
    ][:10]:
        print(f"    {line}")
    print(f"worker log lines at WARNING or above, by message: {record['by_message']}")


REPORTS = {"latency": report_latency, "resets": report_chaos, "chaos": report_chaos}
SCENARIO_RUNS = {"latency": latency, "resets": resets, "chaos": chaos_run}


def scenario_args(args: argparse.Namespace, name: str) -> argparse.Namespace:
    """The options as this scenario ran them: its own defaults where none was given."""
    mine = argparse.Namespace(**vars(args))
    mine.runs = args.runs or DEFAULT_RUNS[name]
    mine.pause = args.pause if args.pause is not None else DEFAULT_PAUSE.get(name, 0.0)
    return mine


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_common_arguments(parser)
    options.add_wait_quiet_argument(parser, "scenario and latency phase")
    add = parser.add_argument
    add("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    add("--runs", type=int, help="runs per scenario (latency 500, resets and chaos 2000)")
    add("--workers", type=int, default=3, help="workers in resets and chaos (3)")
    add("--pool", type=int, default=4, help="their --pool (4)")
    add("--latency-pool", type=int, default=8, help="the latency worker's --pool (8)")
    add("--singles", type=int, default=60, help="latency: runs scheduled one at a time (60)")
    add("--rate", type=float, default=2.0, help="latency: single runs a second (2)")
    add("--reset-rate", type=float, default=0.001, help="chance of a reset per chunk (0.001)")
    add("--blackhole", type=float, default=60.0, help="chaos: seconds of the blackhole (60)")
    add("--pause", type=float, help="seconds each chaos step sleeps (resets 0, chaos 0.02)")
    add("--keep-logs", action="store_true", help="keep the worker logs")
    args = parser.parse_args(argv)
    if args.db == "sqlite":
        parser.error("network faults need a database server: postgres or mariadb")
    if args.workers < 2 and "chaos" in args.scenario:
        parser.error("chaos needs --workers 2 or more: one is blackholed")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    failed = False
    with session(args, "everystep-netfaults-") as current:
        for name in args.scenario:
            mine = scenario_args(args, name)
            before = len(current.workers.problems())
            parts = SCENARIO_RUNS[name](mine, current)
            problems = current.workers.problems()[before:] + parts.pop("victim_problems", [])
            problems = faults_only(problems)
            broken = parts.pop("problems")
            record = result_record(
                "netfaults", mine, current.info, problems[:200], scenario=name, **parts
            )
            record.update(problems=broken, by_message=by_message(problems))
            print_header(record)
            REPORTS[name](record)
            verdict = "; ".join(record["problems"]) or "all hold"
            print(f"invariants: {verdict}")
            append_result(record, args.results)
            failed = failed or bool(record["problems"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
