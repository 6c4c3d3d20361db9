"""``task_framework.framework_of`` tells a Django ``Task`` from anything else without
running code of the object it is given: a task run's name may name any object a loaded
module holds, and ``isinstance`` would read its ``__class__``."""

from __future__ import annotations

from typing import Any

from everystep.task_framework import framework_of, is_everystep_backend

try:  # the framework's Task class must be loaded for framework_of to compare with it
    import django.tasks.base as framework_base
except ImportError:  # Django 5.2: the backport
    import django_tasks.base as framework_base  # type: ignore[no-redef]


class _Spy:
    """An object whose ``__class__`` is code, as a lazily loaded module's is."""

    reads: list[str] = []

    @property  # type: ignore[misc]
    def __class__(self) -> Any:
        _Spy.reads.append("__class__")
        return object


def test_framework_of_reads_no_attribute_of_the_object() -> None:
    """An object that is no Task is refused without its ``__class__`` being read."""
    spy = _Spy()
    assert framework_of(spy) is None
    assert framework_of(framework_base.Task) is None, "the class itself is no Task"
    assert _Spy.reads == []


def test_is_everystep_backend_needs_the_mark_to_be_true() -> None:
    """Only an attribute ``everystep_backend`` that is exactly True marks a backend."""

    class Marked:
        everystep_backend = True

    class Truthy:
        everystep_backend = "yes"

    assert is_everystep_backend(Marked) and is_everystep_backend(Marked())
    assert not is_everystep_backend(Truthy) and not is_everystep_backend(object())
