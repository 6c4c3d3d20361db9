"""A worker whose database connections are blackholed mid-step (issue 37), on PostgreSQL and
MariaDB: every packet between the worker and its database dropped, no reset, no ICMP,
as a NAT or a load balancer that lost its state, or a vanished host, does it.

The worker runs in a network namespace of the test's own and reaches the database through
a proxy on the host side of the namespace's veth pair; the blackhole is an iptables rule
inside the namespace. A second, healthy worker runs on the host. What must hold:

- the worker notices within its ``--network-timeout`` and a heartbeat, and ``/readyz``
  says not ready meanwhile;
- the healthy worker takes its runs over after the orphan timeout; no step is recorded
  twice and only steps in flight at the fault run again (``chaos_checks``);
- the fault ends as a NAT that lost its state ends it (new connections pass, the old
  flows stay dropped), and the worker takes new work again without a restart;
- SIGTERM, during the fault or after it, ends the process with 0 within its drain.
"""

from __future__ import annotations

import pprint
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connection

from tests.acceptance.conftest import WorkerProcess, wait_until
from tests.netfaults.netns import Namespace, namespace
from tests.netfaults.proxy import Proxy
from tests.testapp import chaos, chaos_checks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backends("postgres", "mariadb")]

NETWORK_TIMEOUT = 6  # the victim's --network-timeout
HEARTBEAT = 1
ORPHAN_TIMEOUT = 8
DRAIN = 5
SHUTDOWN_GRACE = 5  # everystep.worker.supervisor.SHUTDOWN_GRACE
PROBE_PORT = 9411  # inside the namespace: its own loopback, no clash with the host
PAUSE = 0.3  # seconds each chaos step sleeps, so the fault lands inside one
FLAGS = ("--pool", "4", "--poll", "0.05", "--heartbeat", str(HEARTBEAT))
FLAGS += ("--orphan-timeout", str(ORPHAN_TIMEOUT))


@pytest.fixture
def cut_off() -> Iterator[tuple[Namespace, Proxy]]:
    """A namespace, and a proxy to the database under test on its host side."""
    upstream = ("127.0.0.1", int(connection.settings_dict["PORT"]))
    with namespace() as ns:
        proxy = Proxy(upstream, listen=(ns.host_ip, 0))
        proxy.client_timeout = 5.0
        proxy.start()
        try:
            yield ns, proxy
        finally:
            proxy.stop()


def _through(proxy: Proxy) -> dict[str, str]:
    """A worker's environment pointing it at the proxy."""
    prefix = "EVERYSTEP_TEST_PG" if connection.vendor == "postgresql" else "EVERYSTEP_TEST_MYSQL"
    host, port = proxy.address
    return {f"{prefix}_HOST": host, f"{prefix}_PORT": str(port)}


def _victim(workers: Callable[..., WorkerProcess], ns: Namespace, proxy: Proxy) -> WorkerProcess:
    return workers(
        "victim",
        *FLAGS,
        "--network-timeout",
        str(NETWORK_TIMEOUT),
        "--drain",
        str(DRAIN),
        "--metrics-port",
        str(PROBE_PORT),
        env=_through(proxy),
        wrap=ns.wrap(),
    )


def _probe(ns: Namespace, path: str) -> int:
    """The status of GET ``path`` on the victim's probe port, from inside its namespace
    (0: no answer within 3 s)."""
    url = f"http://127.0.0.1:{PROBE_PORT}{path}"
    code = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    print(urllib.request.urlopen({url!r}, timeout=3).status)\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code)\n"
        "except OSError:\n"
        "    print(0)\n"
    )
    out = subprocess.run(
        ns.command([sys.executable, "-c", code]), capture_output=True, text=True, timeout=20
    )
    return int(out.stdout.strip() or 0)


def _no_probe_traceback(proc: WorkerProcess) -> None:
    """No probe answered with a traceback (the chaos mix's failing runs log theirs)."""
    log = proc.log()
    assert "Exception occurred during processing of request" not in log
    assert "BrokenPipeError" not in log


def test_a_blackholed_worker_is_detected_taken_over_and_recovers_without_a_restart(
    workers, cut_off
):
    ns, proxy = cut_off
    chaos.schedule_mix(24, PAUSE)
    victim = _victim(workers, ns, proxy)
    wait_until(lambda: _probe(ns, "/readyz") == 200, 60, "the victim ready")
    wait_until(lambda: chaos.held_runs("victim"), 60, "the victim to hold runs")

    began = time.time()
    ns.blackhole()
    healthy = workers("healthy", *FLAGS)
    held: set[str] = set(chaos.held_runs("victim"))

    # Not ready within two heartbeats and a second (the heartbeat's word), plus a probe.
    wait_until(lambda: _probe(ns, "/readyz") == 503, 2 * HEARTBEAT + 10, "/readyz 503")
    # The blocked statements given up on: the heartbeat says so.
    wait_until(
        lambda: "heartbeat failed" in victim.log(),
        NETWORK_TIMEOUT + HEARTBEAT + 10,
        "the victim to notice the blackhole",
    )
    detected = time.time() - began
    assert _probe(ns, "/healthz") == 200, "a database fault is not a wedged loop"

    def taken_over() -> bool:
        now = chaos.held_runs("victim")
        held.update(now)
        return not now

    wait_until(taken_over, ORPHAN_TIMEOUT + 60, "the victim's runs taken over")
    # The fault ends as a NAT that lost its state ends it: new flows pass, old ones not.
    # (By now the victim may have given up on all of its connections and be connecting
    # again: then nothing old is left to keep dropped, and its connects pass.)
    ns.lift_keeping_old_flows()
    ended = time.time()
    wait_until(lambda: _probe(ns, "/readyz") == 200, NETWORK_TIMEOUT + 30, "ready again")
    if connection.vendor == "postgresql":
        # The LISTEN connection, silent on an old flow, was given up on and made again.
        wait_until(
            lambda: "LISTEN connection back" in victim.log(),
            NETWORK_TIMEOUT + 30,
            "the LISTEN connection back",
        )
        assert "LISTEN connection lost" in victim.log()

    # Only the victim left: new work must reach it, without a restart.
    healthy.signal(signal.SIGTERM)
    assert healthy.wait(60) == 0
    wait_until(lambda: chaos.terminal_count() == 24, 120, "the first runs terminal")
    chaos.schedule_mix(4, PAUSE, first=24)
    wait_until(lambda: chaos.terminal_count() == 28, 60, "new work done by the victim")

    figures = chaos_checks.analyse(
        [chaos.Interruption("stop", began, ended, frozenset(held), victim.pid)]
    )
    assert chaos_checks.problems(figures) == [], pprint.pformat(figures)
    assert figures["recorded_twice"] == 0 and figures["lost"] == 0
    print(f"\nblackhole detected after {detected:.1f}s; {pprint.pformat(figures)}")

    victim.signal(signal.SIGTERM)
    assert victim.wait(DRAIN + SHUTDOWN_GRACE + 10) == 0
    _no_probe_traceback(victim)


@pytest.mark.parametrize("when", ["during", "after"])
def test_sigterm_during_or_after_a_blackhole_exits_0_within_the_drain(workers, cut_off, when):
    """``during``: the connections blackholed; ``after``: the fault ended with the old flows
    still dropped, before the worker noticed."""
    ns, proxy = cut_off
    chaos.schedule_mix(8, 2.0)  # long steps: the signal lands while they run
    victim = _victim(workers, ns, proxy)
    wait_until(lambda: chaos.held_runs("victim"), 60, "the victim to hold runs")
    ns.blackhole()
    time.sleep(1.0)
    if when == "after":
        ns.lift_keeping_old_flows()
    sent = time.monotonic()
    victim.signal(signal.SIGTERM)
    assert victim.wait(DRAIN + SHUTDOWN_GRACE + 10) == 0
    took = time.monotonic() - sent
    assert took <= DRAIN + SHUTDOWN_GRACE + 3, f"the worker took {took:.1f}s to exit"
    _no_probe_traceback(victim)
    print(f"\nSIGTERM {when} the blackhole: exited 0 after {took:.1f}s")


def test_probe_answers_stay_quick_while_the_database_is_blackholed(workers, cut_off):
    """``/readyz`` is the heartbeat's word: it never waits on a silent connection."""
    ns, proxy = cut_off
    victim = _victim(workers, ns, proxy)
    wait_until(lambda: _probe(ns, "/readyz") == 200, 60, "the victim ready")
    ns.blackhole()
    for _ in range(5):
        started = time.monotonic()
        status = _probe(ns, "/readyz")
        assert status in (200, 503) and time.monotonic() - started < 3
    victim.signal(signal.SIGKILL)
