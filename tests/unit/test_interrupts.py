"""The worker's signal handlers take no lock (issue 53): a second SIGTERM that arrives
while the first handler is inside ``Event.set()`` used to wait for ever on the lock the
interrupted frame held. Python runs a nested handler on the same thread, so the test
holds the stop event's lock on a thread and calls the handler there, as the nested signal
would. (tests/acceptance/test_worker.py sends real double signals to real workers.)"""

from __future__ import annotations

import signal
import threading

from everystep.worker.interrupts import Interrupts
from everystep.worker.worker_state import WorkerOptions, WorkerState


def interrupts() -> Interrupts:
    state = WorkerState(WorkerOptions.resolve(name="nested", pool_size=1))

    def stop() -> None:
        state.stop.set()
        state.wake.set()

    return Interrupts(state, stop)


def test_a_signal_handled_while_the_stop_events_lock_is_held_returns_at_once() -> None:
    signals = interrupts()
    returned = threading.Event()

    def nested() -> None:
        # The frame a second signal interrupts: the first handler's Event.set(), which
        # holds the event's (non-reentrant) lock while it runs.
        with signals.state.stop._cond:  # type: ignore[attr-defined]
            signals.handle(signal.SIGTERM, None)
            signals.handle(signal.SIGTERM, None)
        returned.set()

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(5)
    assert returned.is_set(), "the handler waited on a lock its own thread holds"
    assert not signals.state.stop.is_set(), "nothing acted on before act()"


def test_act_drains_on_the_first_signal_and_forces_on_the_second() -> None:
    signals = interrupts()
    signals.handle(signal.SIGTERM, None)
    signals.act()
    assert signals.state.stop.is_set() and not signals.state.force.is_set()
    signals.handle(signal.SIGINT, None)
    signals.handle(signal.SIGTERM, None)
    signals.act()
    assert signals.state.force.is_set()
    assert signals.pending == []


def test_off_the_main_thread_nothing_is_installed() -> None:
    signals = interrupts()
    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=signals.install)
    thread.start()
    thread.join(5)
    assert signals.previous == {}
    assert signal.getsignal(signal.SIGTERM) is before


def test_install_and_restore_on_the_main_thread() -> None:
    signals = interrupts()
    before = signal.getsignal(signal.SIGTERM)
    signals.install()
    try:
        assert signal.getsignal(signal.SIGTERM) == signals.handle
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_liveness_fails_once_a_drain_outlives_its_deadline_by_the_limit() -> None:
    """A worker still draining past ``drain`` + the shutdown's grace + the liveness limit
    should have exited: it is stuck, and the orchestrator must restart it. With ``drain``
    0 (wait for the steps however long) it never is."""
    from everystep.worker.health import liveness
    from everystep.worker.supervisor import SHUTDOWN_GRACE

    for drain, expected in ((30.0, False), (0.0, True)):
        state = WorkerState(
            WorkerOptions.resolve(name="overrun", pool_size=1, drain=drain, liveness_timeout=60)
        )
        state.begin_stopping()
        assert liveness(state).ok, "a drain just begun is alive"
        assert state.stopping_since is not None
        # The loop stopped ticking when the drain began; the heartbeat still beats.
        state.stopping_since -= drain + SHUTDOWN_GRACE + 61
        state.last_tick = state.stopping_since
        state.beat_attempted()
        assert liveness(state).ok is expected
