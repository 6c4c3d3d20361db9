"""Functions' annotations as shapes (a workflow's, a step's, a task's), and storing and
reading a value, or a run's arguments, through them."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from everystep import serde
from everystep.shapes.compiled import Shape, of, type_hints


@dataclasses.dataclass(frozen=True)
class Signature:
    """The shapes of a function's parameters and return (None where plain)."""

    positional: tuple[Shape | None, ...]  # by position, for the parameters that take one
    rest: Shape | None  # each of ``*args``
    keywords: dict[str, Shape | None]
    returns: Shape | None

    @property
    def typed(self) -> bool:
        return any(self.positional) or self.rest is not None or any(self.keywords.values())

    def argument(self, index: int) -> Shape | None:
        return self.positional[index] if index < len(self.positional) else self.rest

    @property
    def allowed(self) -> frozenset[type]:
        shapes = [*self.positional, self.rest, *self.keywords.values()]
        return frozenset().union(*(shape.allowed for shape in shapes if shape is not None))


_PLAIN = Signature((), None, {}, None)


def signature(fn: Callable[..., Any]) -> Signature:
    """The shapes of ``fn``'s annotations (a decorated function: its own)."""
    found = _signatures.get(fn)
    if found is None:
        found = _signatures[fn] = _signature(fn)
    return found


_signatures: dict[Any, Signature] = {}


def _signature(fn: Callable[..., Any]) -> Signature:
    func = inspect.unwrap(fn)
    if not callable(func) or not hasattr(func, "__annotations__") or not func.__annotations__:
        return _PLAIN
    hints = type_hints(func)
    if not hints:
        return _PLAIN
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return _PLAIN
    positional, rest, keywords = [], None, {}
    for param in params:
        shape = of(hints[param.name]) if param.name in hints else None
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            positional.append(shape)
        if param.kind is param.VAR_POSITIONAL:
            rest = shape
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            keywords[param.name] = shape
        elif param.kind is param.VAR_KEYWORD:
            keywords["**"] = shape
    returns = of(hints["return"]) if "return" in hints else None
    return Signature(tuple(positional), rest, keywords, returns)


def returns(fn: Callable[..., Any]) -> Shape | None:
    """The shape of ``fn``'s return annotation."""
    return signature(fn).returns


def encode(value: Any, where: str, shape: Shape | None) -> Any:
    """``serde.encode`` of ``value``, where ``shape`` allows its typed parts."""
    return serde.encode(value, where, shape.allowed if shape is not None else serde.NOTHING)


def decode(data: Any, shape: Shape | None, where: str = "value") -> Any:
    """A stored value, rebuilt as ``shape`` says (plain ``serde.decode`` for None)."""
    return serde.decode(data) if shape is None else shape.rebuild(data, where)


def encode_arguments(fn: Callable[..., Any], args: list[Any], where: str) -> Any:
    """A workflow's positional arguments, stored: typed values where its parameters'
    annotations name them."""
    return serde.encode(args, where, signature(fn).allowed)


def decode_arguments(fn: Callable[..., Any], data: Any, where: str, skip: int = 0) -> list[Any]:
    """The stored positional arguments of a workflow, rebuilt as its parameters say
    (``skip``: how many parameters come before them, a task's context)."""
    sig = signature(fn)
    if not sig.typed or not isinstance(data, list):
        return serde.decode(data)
    return [
        decode(item, sig.argument(i + skip), f"argument {i} of {where}")
        for i, item in enumerate(data)
    ]


def encode_call(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], where: str) -> Any:
    """A task's positional and keyword arguments, stored as ``[args, kwargs]``."""
    return serde.encode([args, kwargs], where, signature(fn).allowed)


def decode_call(
    fn: Callable[..., Any], args: Any, kwargs: Any, where: str, skip: int = 0
) -> tuple[list[Any], dict[str, Any]]:
    """A task's stored positional and keyword arguments, rebuilt as its parameters say."""
    sig = signature(fn)
    if not sig.typed:
        return serde.decode(args), serde.decode(kwargs)
    positional = decode_arguments(fn, args, where, skip)
    stored = serde.stored_object(kwargs) or {}
    keywords = {
        key: decode(item, sig.keywords.get(key, sig.keywords.get("**")), f"{key!r} of {where}")
        for key, item in stored.items()
    }
    return positional, keywords
