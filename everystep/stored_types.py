"""Which classes a stored value may name: the allow-list behind rebuilding an enum member
(``serde``) or an exception (``stored_errors``) from a row.

A row names a class by ``module.Qualname``. That name is only *looked up* here, never
imported: a row is data anyone with write access to the tables (or a bug) may have
written, and importing a module runs its top-level code. A name resolves only to a
class this process already holds because its code declared it:

- every Enum class and exception type this process encodes (``remember``);
- ``everystep.errors``' classes and the builtins' exception classes;
- classes registered with ``everystep.register_type``;
- on a miss, the Enum and exception classes the registered ``@workflow``, ``@step``
  and Django ``@task`` (on everystep's backend) functions name (their annotations and
  the global names their code uses, one attribute deep, the plain functions of their own
  module they call included), and the loaded subclasses of those exception types. The
  scan is redone only for functions registered since the last one.

A name with a ``__main__`` part never resolves: the same name means a different module
in every process. This module imports nothing of Django, and of the project only
``everystep.errors``; it reads the workflow registry from ``sys.modules``.
"""

from __future__ import annotations

import builtins
import enum
import logging
import re
import sys
import threading
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from everystep import errors

logger = logging.getLogger("everystep.run")

T = TypeVar("T", bound=type)

_lock = threading.Lock()
# ``module.Qualname`` -> the class a stored value naming it is rebuilt from.
_known: dict[str, type] = {}
# Every @step function defined in this process (``decorators.step`` adds them).
_step_functions: list[Callable[..., Any]] = []
# The functions already scanned (weakly: a replaced workflow body may go away, and its
# id be reused by a new function that must be scanned).
_scanned: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
# The unknown names already warned about: one warning per name per process, and a bound
# on how many, since the names come from rows.
_warned: set[str] = set()
MAX_WARNED = 1000
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _allowed_kind(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, enum.Enum | BaseException)


def findable(cls: type) -> bool:
    """Whether ``cls`` is what its ``module.Qualname`` names in this process, looked up in
    ``sys.modules`` (nothing imported), and its name has no ``__main__`` part."""
    path = _qualified(cls)
    if "__main__" in path.split(".") or "<locals>" in path:
        return False
    target: Any = sys.modules.get(cls.__module__)
    for attr in cls.__qualname__.split("."):
        target = _static_attr(target, attr)
    return target is cls


def _static_attr(owner: Any, name: str) -> Any:
    """``owner.name`` read from a module's or a class's own namespace: no module
    ``__getattr__`` (which may import) and no descriptor runs."""
    if isinstance(owner, types.ModuleType):
        return vars(owner).get(name)
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return None


def remember(cls: type) -> bool:
    """Allow ``cls`` (a class this process is storing a value of) to be rebuilt from its
    name; False when the name would not find it (a local class, ``__main__``)."""
    path = _qualified(cls)
    if _known.get(path) is cls:
        return True
    if not findable(cls):
        return False
    _known[path] = cls
    return True


def register_type(cls: T) -> T:
    """Allow a stored value naming ``cls`` (an Enum or an exception class) to be
    rebuilt as it, in every process that imports the module registering it. Usable as a
    class decorator; returns ``cls``."""
    if not _allowed_kind(cls):
        raise TypeError(f"register_type takes an Enum or exception class, not {cls!r}")
    if not remember(cls):
        raise TypeError(
            f"register_type: {_qualified(cls)} cannot be found by that name; define it at "
            "module level in an importable module (not __main__)"
        )
    return cls


def add_step_function(fn: Callable[..., Any]) -> None:
    """Note a ``@step`` function, whose code is scanned for the types it names."""
    with _lock:
        _step_functions.append(fn)


def resolve_enum(path: object) -> type[enum.Enum] | None:
    """The Enum class a stored ``module.Qualname`` names, if it is allowed; else None."""
    cls = _resolve(path)
    return cls if isinstance(cls, type) and issubclass(cls, enum.Enum) else None


def resolve_error(path: object) -> type[BaseException] | None:
    """The exception class a stored ``module.Qualname`` names, if allowed; else None."""
    cls = _resolve(path)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def _resolve(path: object) -> type | None:
    if not isinstance(path, str) or "__main__" in path.split("."):
        return None
    cls = _known.get(path)
    if cls is None and _scan_new_functions():
        cls = _known.get(path)
    return cls


def warn_unknown(kind: str, path: object, instead: str) -> None:
    """Log once per process that a stored ``kind`` names a class not rebuilt here, and
    what the value is read as ``instead``."""
    name = str(path)[:200]
    with _lock:
        if name in _warned or len(_warned) >= MAX_WARNED:
            return
        _warned.add(name)
    logger.warning(
        "stored %s names %r, a class this process does not allow (nothing is imported "
        "for a row): read as %s; register it with everystep.register_type if the code "
        "uses it",
        kind,
        name,
        instead,
        extra={"event": "stored_type_unknown", "stored_type": name},
    )


# -- the scan --------------------------------------------------------------------------


def _registered_functions() -> list[Callable[..., Any]]:
    # Looked up, not imported: the registry imports serde, which imports this module.
    registry = sys.modules.get("everystep.registry")
    found = list(_step_functions)
    if registry is not None:
        for name in registry.registered_names():
            defn = registry.lookup(name)
            if defn is not None:
                found.append(defn.fn)
        found.extend(registry.registered_task_functions())  # a Django @task's body
    return found


def _scan_new_functions() -> bool:
    """Scan the workflow and step functions not scanned yet; whether there were any."""
    with _lock:
        fresh = [fn for fn in _registered_functions() if fn not in _scanned]
        if not fresh:
            return False
        named: set[type] = set()
        for fn in fresh:
            _scanned.add(fn)
            named.update(_types_named_by(fn))
        for cls in named | set(_subclasses(named)):
            remember(cls)
        return True


def _types_named_by(fn: Callable[..., Any]) -> Iterator[type]:
    """The Enum and exception classes ``fn`` names, and those of the plain functions of
    its own module it calls (a helper that raises), transitively."""
    seen: set[int] = set()
    todo = [fn]
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        for obj in _objects_named_by(func):
            if _allowed_kind(obj):
                yield obj
            elif isinstance(obj, types.FunctionType) and obj.__module__ == func.__module__:
                todo.append(obj)


def _objects_named_by(fn: Any) -> Iterator[Any]:
    func = getattr(fn, "__wrapped__", fn)  # a decorated step: the body is underneath
    namespace = getattr(func, "__globals__", None)
    code = getattr(func, "__code__", None)
    if not isinstance(namespace, dict) or not isinstance(code, types.CodeType):
        return
    names = set(_code_names(code))
    for value in _annotation_objects(func, namespace):
        yield value
    for name in names:
        value = namespace.get(name, vars(builtins).get(name))
        if value is None:
            continue
        yield value
        if isinstance(value, types.ModuleType | type):
            # ``errors.PaymentDeclined``, ``Order.DoesNotExist``: one attribute deep.
            for attr in names:
                yield _static_attr(value, attr)


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # nested functions, lambdas, comprehensions
            yield from _code_names(const)


def _annotation_objects(func: Any, namespace: dict[str, Any]) -> Iterator[Any]:
    try:
        annotations = dict(getattr(func, "__annotations__", None) or {})
    except Exception:  # an annotation that cannot be evaluated names nothing we can use
        return
    for annotation in annotations.values():
        yield from _walk_annotation(annotation, namespace)


def _walk_annotation(annotation: Any, namespace: dict[str, Any]) -> Iterator[Any]:
    if isinstance(annotation, str):
        # ``from __future__ import annotations``: read the names, never ``eval`` them.
        for dotted in _IDENTIFIER.findall(annotation):
            head, *rest = dotted.split(".")
            value = namespace.get(head)
            for attr in rest:
                value = _static_attr(value, attr)
            yield value
        return
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _walk_annotation(arg, namespace)


def _subclasses(bases: Iterable[type]) -> Iterator[type]:
    """The loaded subclasses of the exception types found, except under the broad bases
    of the builtins (``Exception``...), which would allow every exception loaded."""
    todo = [cls for cls in bases if issubclass(cls, BaseException) and not _broad(cls)]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        for sub in type.__subclasses__(cls):
            if sub not in seen:
                seen.add(sub)
                yield sub
                todo.append(sub)


def _broad(cls: type) -> bool:
    return cls.__module__ in ("builtins", "enum")


def _seed() -> None:
    for module in (builtins, errors):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException):
                remember(value)


_seed()
