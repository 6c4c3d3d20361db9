"""What the async machinery reads of asyncio's and CPython's internals, in one place.

Two facts that no public API gives, each read the way the CPython versions in
``CHECKED_ON`` (3.11, 3.12, 3.13) expose it; ``tests/unit/test_asyncio_internals.py``
pins both on the Python it runs on, and fails on a version not listed until someone has
checked it there:

- which done-callbacks ``asyncio.wait`` and ``asyncio.as_completed`` add to the tasks
  they wait for (private functions of ``asyncio.tasks``, matched by their qualified
  names): a body's task refuses them, since they report tasks in completion order;
- the arguments of a coroutine object that has not finished (its frame's locals): an
  operation handed to a task (``asyncio.gather``) is found through its ``op``.

A Python upgrade that changes either breaks the test here first, not a run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

CHECKED_ON = frozenset({(3, 11), (3, 12), (3, 13)})

# The completion callbacks of ``asyncio.wait`` (``_wait``'s) and ``asyncio.as_completed``
# (a closure up to 3.12, a method of ``_AsCompletedIterator`` from 3.13).
_BY_COMPLETION = frozenset(
    {
        "_wait.<locals>._on_completion",
        "as_completed.<locals>._on_completion",
        "_AsCompletedIterator._handle_completion",
    }
)


def checked_here() -> bool:
    """Whether the running Python is one of the versions these readings were checked on."""
    return sys.version_info[:2] in CHECKED_ON


def reports_by_completion(callback: Any) -> bool:
    """Whether ``callback``, given to a task's ``add_done_callback``, is how
    ``asyncio.wait`` or ``asyncio.as_completed`` learns which task finished first."""
    if getattr(callback, "__module__", None) != "asyncio.tasks":
        return False
    function = getattr(callback, "__func__", callback)  # a bound method's function
    return getattr(function, "__qualname__", "") in _BY_COMPLETION


def made_by(coro: object, fn: Callable[..., Any]) -> bool:
    """Whether ``coro`` is a coroutine object made by calling the ``async def`` ``fn``."""
    return getattr(coro, "cr_code", None) is getattr(fn, "__code__", None)


def argument_of(coro: object, name: str) -> Any:
    """The argument ``name`` of the coroutine object ``coro``, read from its frame while it
    has not finished; None once it has (its frame is gone)."""
    frame = getattr(coro, "cr_frame", None)
    return None if frame is None else frame.f_locals.get(name)
