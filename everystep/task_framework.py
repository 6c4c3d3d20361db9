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


def framework_of(obj: Any) -> str | None:
    """The framework package (``FRAMEWORKS``) whose ``Task`` ``obj`` is, or None."""
    for package in FRAMEWORKS:
        task_class = getattr(sys.modules.get(f"{package}.base"), "Task", None)
        if isinstance(task_class, type) and isinstance(obj, task_class):
            return package
    return None


def framework_module(task: Any, name: str) -> ModuleType:
    """The module ``name`` (``base``, ``signals``, ``exceptions``) of ``task``'s framework."""
    package = framework_of(task)
    assert package is not None, "framework_module() of an object that is no Task"
    return importlib.import_module(f"{package}.{name}")
