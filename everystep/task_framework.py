"""Django's task framework as everystep meets it: Django 6's ``django.tasks``, or the
``django_tasks`` backport on Django 5.2. Which one a ``Task`` object belongs to is read
from ``sys.modules``: a ``Task`` exists only once its framework is imported, and this
module must not import Django (``import everystep`` does not)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

# The packages that define the framework: Django 6 itself, and the backport.
FRAMEWORKS = ("django.tasks", "django_tasks")

# The attribute an everystep backend class carries, so the engine and the app's start-up
# recognise one without importing ``everystep.tasks`` (an edge module).
BACKEND_MARK = "everystep_backend"


def framework_of(obj: Any) -> str | None:
    """The framework package (``FRAMEWORKS``) whose ``Task`` ``obj`` is, or None."""
    return _framework_with(obj, "Task")


def is_task_result(obj: Any) -> bool:
    """Whether ``obj`` is a ``TaskResult`` of Django's task framework (or its backport)."""
    return _framework_with(obj, "TaskResult") is not None


def _framework_with(obj: Any, class_name: str) -> str | None:
    """The framework package whose class ``class_name`` ``obj`` is an instance of."""
    # ``type(obj)``, not ``isinstance``: isinstance reads ``obj.__class__``, which runs
    # code on an object that defines it (a lazily imported module imports itself then),
    # and ``obj`` may be anything a module holds under a name a run's row gave.
    kind = type(obj)
    for package in FRAMEWORKS:
        made = getattr(sys.modules.get(f"{package}.base"), class_name, None)
        if isinstance(made, type) and issubclass(kind, made):
            return package
    return None


def is_everystep_backend(backend: Any) -> bool:
    """Whether ``backend`` (a task backend, or its class) is everystep's."""
    return getattr(backend, BACKEND_MARK, False) is True


def framework_module(task: Any, name: str) -> ModuleType:
    """The module ``name`` (``base``, ``signals``, ``exceptions``) of ``task``'s framework."""
    package = framework_of(task)
    assert package is not None, "framework_module() of an object that is no Task"
    return importlib.import_module(f"{package}.{name}")
