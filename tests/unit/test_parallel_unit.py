"""``everystep.parallel`` outside a running workflow: no step is recorded, no database.

Branch threads call ``django.db.connections.close_all()``, which only needs settings
(pytest-django configures them); no test here opens a connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import everystep
from everystep import conf
from everystep.context import current
from everystep.errors import Terminal


class Counter:
    """Thread-safe count of branch executions."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self.value += 1
            return self.value


def raiser(exc: BaseException) -> Callable[[], Any]:
    def branch() -> Any:
        raise exc

    return branch


def slow(value: Any, seconds: float, done: list[Any]) -> Callable[[], Any]:
    def branch() -> Any:
        time.sleep(seconds)
        done.append(value)
        return value

    return branch


def test_results_are_a_tuple_in_branch_order() -> None:
    """Results come back as a tuple in branch order, not completion order."""
    done: list[int] = []
    result = everystep.parallel(
        slow(0, 0.06, done), slow(1, 0.04, done), slow(2, 0.02, done), slow(3, 0.0, done)
    )
    assert type(result) is tuple
    assert result == (0, 1, 2, 3)
    assert sorted(done) == [0, 1, 2, 3]


def test_single_branch_returns_one_tuple() -> None:
    """One branch gives a one-element tuple."""
    assert everystep.parallel(lambda: "only") == ("only",)


def test_sequence_branch_runs_in_order_and_returns_a_tuple() -> None:
    """A list or tuple branch runs its callables in order; its result is a tuple."""
    order: list[str] = []

    def step(name: str) -> Callable[[], str]:
        def call() -> str:
            order.append(name)
            return name.upper()

        return call

    result = everystep.parallel([step("a"), step("b"), step("c")], lambda: 9, (step("z"),))
    assert result == (("A", "B", "C"), 9, ("Z",))
    assert type(result[0]) is tuple
    assert type(result[2]) is tuple
    assert [name for name in order if name in "abc"] == ["a", "b", "c"]


def test_empty_parallel_is_value_error() -> None:
    """``parallel()`` with no branch raises ValueError."""
    with pytest.raises(ValueError):
        everystep.parallel()


@pytest.mark.parametrize("empty", [[], ()], ids=["list", "tuple"])
def test_empty_sequence_branch_is_value_error_before_anything_runs(empty: Any) -> None:
    """An empty sequence branch raises ValueError and no other branch has run."""
    counter = Counter()
    with pytest.raises(ValueError, match="branch 1"):
        everystep.parallel(counter, empty, [counter, counter])
    assert counter.value == 0


@pytest.mark.parametrize("bad", [None, 5, "text", b"x", {"a": 1}], ids=repr)
def test_non_callable_branch_is_type_error_before_anything_runs(bad: Any) -> None:
    """A non-callable branch raises TypeError and no branch has run."""
    counter = Counter()
    with pytest.raises(TypeError, match="branch 2"):
        everystep.parallel(counter, [counter], bad, counter)
    assert counter.value == 0


def test_non_callable_sequence_element_is_type_error_before_anything_runs() -> None:
    """A non-callable element inside a sequence branch raises TypeError; nothing has run."""
    counter = Counter()
    with pytest.raises(TypeError, match="element 1"):
        everystep.parallel(counter, [counter, "not callable", counter])  # type: ignore[list-item]
    assert counter.value == 0


def test_all_branches_complete_even_if_one_fails() -> None:
    """A failing branch does not stop the others: every branch runs to its end."""
    done: list[int] = []
    with pytest.raises(ValueError):
        everystep.parallel(
            raiser(ValueError("first")),
            slow(1, 0.05, done),
            [slow(2, 0.02, done), slow(3, 0.02, done)],
        )
    assert sorted(done) == [1, 2, 3]


def test_sequence_branch_stops_at_its_own_error_but_others_finish() -> None:
    """An error inside a sequence branch ends that branch; other branches still finish."""
    done: list[int] = []
    after = Counter()
    boom = ValueError("boom")
    with pytest.raises(ValueError) as info:
        everystep.parallel([raiser(boom), after], slow(1, 0.03, done))
    assert info.value is boom
    assert after.value == 0
    assert done == [1]


@pytest.mark.parametrize("failing_index", [0, 1, 2])
def test_single_error_is_reraised_as_is(failing_index: int) -> None:
    """Exactly one failing branch: its exception object itself is raised, not a group."""
    error = KeyError("gone")
    branches: list[Callable[[], Any]] = [lambda: 1, lambda: 2, lambda: 3]
    branches[failing_index] = raiser(error)
    with pytest.raises(KeyError) as info:
        everystep.parallel(*branches)
    assert info.value is error


def test_two_errors_raise_exception_group_with_both() -> None:
    """Two failing branches raise an ExceptionGroup holding both exceptions."""
    first, second = ValueError("one"), KeyError("two")
    with pytest.raises(ExceptionGroup) as info:
        everystep.parallel(raiser(first), lambda: "ok", raiser(second))
    assert len(info.value.exceptions) == 2
    assert {id(exc) for exc in info.value.exceptions} == {id(first), id(second)}


@pytest.mark.parametrize("terminal_first", [True, False])
def test_terminal_wins_over_ordinary_error(terminal_first: bool) -> None:
    """A Terminal from one branch is raised instead of another branch's ValueError."""
    stop = Terminal("stop", {"why": "test"})
    plain = ValueError("ordinary")
    branches = [raiser(stop), raiser(plain)]
    if not terminal_first:
        branches.reverse()
    with pytest.raises(Terminal) as info:
        everystep.parallel(*branches)
    assert info.value is stop


def test_nested_parallel_returns_nested_tuples() -> None:
    """A branch may call ``parallel()`` itself; results nest in branch order."""
    result = everystep.parallel(
        lambda: everystep.parallel(lambda: 1, lambda: everystep.parallel(lambda: 2)),
        [lambda: everystep.parallel(lambda: 3, lambda: 4), lambda: 5],
        lambda: 6,
    )
    assert result == ((1, (2,)), ((3, 4), 5), 6)


def test_error_in_nested_parallel_propagates_through_outer() -> None:
    """An error raised in an inner fork's branch reaches the outer caller as is."""
    boom = ValueError("deep")
    with pytest.raises(ValueError) as info:
        everystep.parallel(lambda: 0, lambda: everystep.parallel(lambda: 1, raiser(boom)))
    assert info.value is boom


def test_context_is_none_inside_branches_outside_a_run() -> None:
    """Outside a run, code in a branch (thread or inline) sees no workflow context."""
    seen = everystep.parallel(*[current for _ in range(4)])
    assert seen == (None, None, None, None)


def test_nested_forks_complete_with_bounded_threads() -> None:
    """20 branches each forking 20 all complete while live threads stay bounded."""
    limit = conf.fork_threads()
    baseline = threading.active_count()
    peak = [baseline]
    lock = threading.Lock()

    def leaf() -> int:
        with lock:
            peak[0] = max(peak[0], threading.active_count())
        time.sleep(0.001)
        return 1

    def fan_out() -> tuple[int, ...]:
        return everystep.parallel(*[leaf for _ in range(20)])

    result = everystep.parallel(*[fan_out for _ in range(20)])
    assert result == tuple((1,) * 20 for _ in range(20))
    # Slot holders are at most ``limit``; a thread that has just released its slot may
    # still be alive for an instant, hence the slack. Unbounded would be ~400 threads.
    assert peak[0] <= baseline + 2 * limit
    assert peak[0] > baseline


def test_thread_slots_are_released_after_forks() -> None:
    """After forks finish (even failing ones) every slot is free: a new fork gets them all."""
    limit = conf.fork_threads()
    everystep.parallel(*[lambda: everystep.parallel(*[lambda: 0] * 10) for _ in range(10)])
    with pytest.raises(ExceptionGroup):
        everystep.parallel(*[raiser(ValueError(str(i))) for i in range(limit + 3)])

    main = threading.get_ident()
    idents: list[int] = []
    lock = threading.Lock()
    release = threading.Event()

    def branch() -> None:
        with lock:
            idents.append(threading.get_ident())
        # Hold the thread (and its slot) until every branch has been placed.
        release.wait(timeout=10)

    def opener() -> None:
        with lock:
            idents.append(threading.get_ident())
        release.set()

    # Branch 0 and whatever finds no free slot run inline in the calling thread.
    everystep.parallel(opener, *[branch for _ in range(limit + 1)])
    assert len(idents) == limit + 2
    assert idents.count(main) == 2
    assert len({ident for ident in idents if ident != main}) == limit
