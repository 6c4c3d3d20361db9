"""The chaos mix over a faulty network (issue 37), on PostgreSQL and MariaDB: workers reach
their database through a TCP proxy (``proxy.py``) that delays every chunk and resets
connections at random, and one of them through a namespace (``netns.py``) that is
blackholed past the orphan timeout. What must hold is what ``chaos_checks`` checks:
every run terminal with its known outcome, none lost, no step recorded twice, and every
re-execution explained by a fault that caught it in flight.

A reset interrupts whatever ran on its connection, and the proxy cannot say which run
that was: each reset is a server restart of its own moment (``ResetWatch``), so a step
may run again only if it was in flight at a reset. ``bench/netfaults.py`` is the long
version, with the figures.
"""

from __future__ import annotations

import pprint
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection

from tests.acceptance.conftest import WorkerProcess, wait_until
from tests.netfaults.netns import Namespace, namespace
from tests.netfaults.proxy import Proxy
from tests.testapp import chaos, chaos_checks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backends("postgres", "mariadb")]

NETWORK_TIMEOUT = 6
HEARTBEAT = 1
ORPHAN_TIMEOUT = 8
FLAGS: tuple[str, ...] = ("--pool", "4", "--poll", "0.05", "--heartbeat", str(HEARTBEAT))
FLAGS += ("--orphan-timeout", str(ORPHAN_TIMEOUT), "--network-timeout", str(NETWORK_TIMEOUT))
WORKERS = ("chaos-0", "chaos-1", "chaos-2")

# Random resets: the 2,000 runs, since with steps that do not sleep they take
# 25-30 s through the proxy on 2 vCPUs; a reset rate per chunk (each way) that gives
# 60-90 resets over them.
RESET_RUNS = 2000
RESET_RATE = 0.001
SMALL_DELAY = 0.002  # seconds each way, per chunk
SMALL_JITTER = 0.003


def proxy_env(address: tuple[str, int]) -> dict[str, str]:
    """A worker's environment pointing it at the proxy at ``address`` (tests/settings.py)."""
    prefix = "EVERYSTEP_TEST_PG" if connection.vendor == "postgresql" else "EVERYSTEP_TEST_MYSQL"
    return {f"{prefix}_HOST": address[0], f"{prefix}_PORT": str(address[1])}


def upstream() -> tuple[str, int]:
    """The database server under test."""
    return "127.0.0.1", int(connection.settings_dict["PORT"])


class ResetWatch:
    """When the proxies reset connections at random, as chaos ``Interruption``s.

    The proxy cannot tell which run a connection served, so each reset stands for a
    server restart of its own moment (``held`` None: every run), from the last look
    before it was counted to the look that counted it: a step that runs again must
    have been in flight at one of them.
    """

    EVERY = 0.02  # seconds between looks at the proxies' counters

    def __init__(self, *proxies: Proxy) -> None:
        self.proxies = proxies
        self.moments: list[tuple[float, float, int]] = []  # (after, before, resets)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="reset-watch", daemon=True)

    def __enter__(self) -> ResetWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def resets(self) -> int:
        return sum(count for *_, count in self.moments)

    def interruptions(self) -> list[chaos.Interruption]:
        return [chaos.Interruption("restart", a, b, None, None) for a, b, _ in self.moments]

    def _count(self) -> int:
        return sum(proxy.stats["resets"] for proxy in self.proxies)

    def _watch(self) -> None:
        seen, looked = self._count(), time.time()
        while True:
            stopping = self._stop.wait(self.EVERY)
            now, count = time.time(), self._count()
            if count > seen:
                self.moments.append((looked, now, count - seen))
                seen = count
            looked = now
            if stopping:
                return


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A proxy on the host's loopback to the database under test, no faults yet."""
    with Proxy(upstream()) as started:
        yield started


def start_fleet(workers: Callable[..., WorkerProcess], proxy: Proxy) -> list[WorkerProcess]:
    return [workers(name, *FLAGS, env=proxy_env(proxy.address)) for name in WORKERS]


def drain(total: int, timeout: float) -> None:
    wait_until(lambda: chaos.terminal_count() == total, timeout, f"{total} runs terminal")


def check(events: list[chaos.Interruption]) -> dict[str, Any]:
    """Every invariant of the chaos checks holds; then the blocked runs settled must
    complete, and the invariants hold again."""
    figures = chaos_checks.analyse(events)
    assert chaos_checks.problems(figures) == [], pprint.pformat(figures)
    settled = chaos.settle_blocked()
    wait_until(
        lambda: (
            chaos.terminal_count() == figures["runs"]
            and not chaos.running_claims()
            and chaos_checks.analyse(events)["statuses"].get("blocked", 0) == 0
        ),
        120,
        f"the {len(settled)} settled runs to finish",
    )
    after = chaos_checks.analyse(events)
    assert chaos_checks.problems(after) == [], pprint.pformat(after)
    return figures


def stop_fleet(fleet: list[WorkerProcess]) -> None:
    """SIGTERM: every worker exits 0 within its drain, the faults still on."""
    for proc in fleet:
        proc.signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in fleet] == [0] * len(fleet)


def test_random_resets_during_2000_runs_lose_nothing_and_record_nothing_twice(workers, proxy):
    """Connections reset at random under 3 busy workers: every run terminal with its
    outcome, none lost, no step recorded twice, re-executions only of steps in flight at
    a reset."""
    proxy.set_faults(delay=SMALL_DELAY, jitter=SMALL_JITTER, reset_rate=RESET_RATE)
    began = time.monotonic()
    with ResetWatch(proxy) as watch:
        fleet = start_fleet(workers, proxy)
        chaos.schedule_mix(RESET_RUNS, 0.0)
        drain(RESET_RUNS, 240)
        took = time.monotonic() - began
        figures = check(watch.interruptions())
        stop_fleet(fleet)
    assert figures["runs"] == RESET_RUNS
    assert watch.resets >= 24, f"only {watch.resets} resets: the run tested too little"
    print(
        f"\n{RESET_RUNS} runs in {took:.0f}s through {watch.resets} resets "
        f"({proxy.stats['accepted']} connections); {pprint.pformat(figures)}"
    )


LATENCY_RUNS = 36
ROUND_TRIP = 0.2  # seconds added per round trip: half each way


def test_200_ms_per_round_trip_every_run_completes_once(workers, proxy):
    """200 ms added to every round trip, no fault: every run reaches its outcome and no
    step runs twice (slowness alone must not look like a dead worker)."""
    proxy.set_faults(delay=ROUND_TRIP / 2)
    fleet = start_fleet(workers, proxy)
    chaos.schedule_mix(LATENCY_RUNS, 0.0)
    drain(LATENCY_RUNS, 180)
    figures = chaos_checks.analyse([])
    assert chaos_checks.problems(figures) == [], pprint.pformat(figures)
    assert figures["re_executions"] == 0 and figures["blocked"] == 0
    stop_fleet(fleet)


MIXED_RUNS = 600
MIXED_PAUSE = 0.02  # seconds each step sleeps, so the victim holds runs at the blackhole
AFTER = 40  # runs scheduled once only the victim is left: it works again without a restart


def test_delays_resets_and_a_blackhole_keep_every_invariant(workers, proxy):
    """Delays and resets throughout on every worker, and one worker blackholed past the
    orphan timeout (in a namespace, through a proxy of its own): its runs are taken over,
    it works again after the fault, and every invariant holds."""
    faults = {"delay": SMALL_DELAY, "jitter": SMALL_JITTER, "reset_rate": RESET_RATE}
    proxy.set_faults(**faults)
    with namespace() as ns, Proxy(upstream(), listen=(ns.host_ip, 0)) as cut_off:
        cut_off.client_timeout = 5.0  # the server ends the blackholed sessions soon after
        cut_off.set_faults(**faults)
        with ResetWatch(proxy, cut_off) as watch:
            healthy = [workers(name, *FLAGS, env=proxy_env(proxy.address)) for name in WORKERS[:2]]
            victim = workers("victim", *FLAGS, env=proxy_env(cut_off.address), wrap=ns.wrap())
            chaos.schedule_mix(MIXED_RUNS, MIXED_PAUSE)
            wait_until(lambda: chaos.terminal_count() >= MIXED_RUNS // 5, 120, "runs done")
            fault = hole(ns, victim, at_least=ORPHAN_TIMEOUT + 2)
            drain(MIXED_RUNS, 240)
            stop_fleet(healthy)
            chaos.schedule_mix(AFTER, MIXED_PAUSE, first=MIXED_RUNS)
            drain(MIXED_RUNS + AFTER, 120)
            figures = check([*watch.interruptions(), fault.event])
            stop_fleet([victim])
    assert figures["stops"] == 1 and fault.event.held and watch.resets
    assert fault.event.end - fault.event.start > ORPHAN_TIMEOUT
    print(f"\n{watch.resets} resets, blackhole {fault.figures()}; {pprint.pformat(figures)}")


def hole(ns: Namespace, victim: WorkerProcess, at_least: float = 0.0) -> Blackhole:
    """Blackhole ``ns`` while the victim in it holds runs, until it logged a failed
    heartbeat, the others took its runs over (its heartbeat then older than the orphan
    timeout) and ``at_least`` seconds passed; end it as a NAT that lost its state ends it
    (the old flows stay dropped)."""
    wait_until(lambda: chaos.held_runs(victim.name), 60, "the victim to hold runs")
    began = time.time()
    ns.blackhole()
    held: set[str] = set()
    seen: dict[str, float] = {}

    def over() -> bool:
        now = chaos.held_runs(victim.name)
        held.update(now)
        if "detected" not in seen and "heartbeat failed" in victim.log():
            seen["detected"] = time.time() - began
        if "taken_over" not in seen and not now:
            seen["taken_over"] = time.time() - began
        return len(seen) == 2 and time.time() - began >= at_least

    wait_until(over, ORPHAN_TIMEOUT + at_least + 60, "the victim to notice, its runs taken over")
    kept = ns.lift_keeping_old_flows()
    event = chaos.Interruption("stop", began, time.time(), frozenset(held), victim.pid)
    return Blackhole(event, seen["detected"], seen["taken_over"], len(kept))


@dataclass(frozen=True)
class Blackhole:
    """What ``hole`` did: the victim's interruption, and when (seconds into the fault) the
    victim logged a failed heartbeat and its runs were all taken over."""

    event: chaos.Interruption
    detected: float
    taken_over: float
    old_flows_kept: int

    def figures(self) -> dict[str, Any]:
        return {
            "seconds": round(self.event.end - self.event.start, 1),
            "held": len(self.event.held or ()),
            "detected_s": round(self.detected, 1),
            "taken_over_s": round(self.taken_over, 1),
            "old_flows_kept": self.old_flows_kept,
        }
