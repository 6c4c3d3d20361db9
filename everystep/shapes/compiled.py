"""An annotation compiled into a ``Shape``: the classes a value stored under it may
hold, and the converter that rebuilds such a value (``everystep.shapes.converters``)."""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import logging
import threading
import types
import typing
from typing import Any

from everystep import serde
from everystep.errors import IncompatibleValue
from everystep.shapes import converters
from everystep.shapes.converters import NONE_TYPE, Convert, Mismatch, describe

logger = logging.getLogger("everystep.run")


class Shape:
    """An annotation compiled: ``allowed`` (the classes ``serde.encode`` may store under
    it) and ``rebuild`` (stored form -> the value the code expects)."""

    __slots__ = ("_convert", "allowed", "hint")

    def __init__(self, hint: Any, convert: Convert, allowed: frozenset[type]):
        self.hint = hint
        self._convert = convert
        self.allowed = allowed

    def rebuild(self, data: Any, where: str = "value") -> Any:
        """The value of the stored form ``data``, typed as the annotation says; an
        ``IncompatibleValue`` naming ``where`` if it no longer fits."""
        try:
            return self._convert(data, "", False)
        except Mismatch as exc:
            raise IncompatibleValue(
                f"{where} was stored in a form {describe(self.hint)} cannot rebuild: {exc} "
                "(the type changed since the value was stored; docs/typed-values.md)"
            ) from None

    def __repr__(self) -> str:
        return f"Shape({describe(self.hint)})"


_lock = threading.RLock()
_compiled: dict[Any, Shape | None] = {}


def of(hint: Any) -> Shape | None:
    """The ``Shape`` of ``hint``; None if plain ``serde`` stores and reads it as it is."""
    try:
        return _compiled[hint]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation (metadata of Annotated): not cached
        return _compile_root(hint)
    with _lock:
        if hint not in _compiled:
            _compiled[hint] = _compile_root(hint)
        return _compiled[hint]


def _compile_root(hint: Any) -> Shape | None:
    compiler = _Compiler()
    convert = compiler.convert(hint)
    if convert is None:
        return None
    return Shape(hint, convert, frozenset(compiler.allowed))


class _Compiler:
    """Turns an annotation into a converter. ``None`` for a part that plain ``serde``
    reads as it is; a recursive type (a tree of dataclasses) compiles once per class."""

    def __init__(self) -> None:
        self.allowed: set[type] = set()
        self._classes: dict[type, Convert | None] = {}
        self._compiling: set[type] = set()
        self._in_class = 0  # compiling the fields of a dataclass or NamedTuple

    def convert(self, hint: Any) -> Convert | None:
        if hint is Any or hint is object or hint is None or hint is NONE_TYPE:
            return None
        if isinstance(hint, str | typing.ForwardRef | typing.TypeVar):
            return None  # not resolved: read as stored
        supertype = getattr(hint, "__supertype__", None)  # NewType
        if supertype is not None:
            return self.convert(supertype)
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            return self.convert(args[0])
        if origin is typing.Literal:
            return converters.literal(args)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin is not None:
            return self._generic(origin, args)
        if isinstance(hint, type):
            return self._class(hint)
        return None

    def _generic(self, origin: Any, args: tuple[Any, ...]) -> Convert | None:
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return self._tuple([self.convert(args[0])], repeated=True)
            return self._tuple([self.convert(arg) for arg in args if arg != ()], repeated=False)
        if origin in (set, frozenset, cabc.Set, cabc.MutableSet):
            kind = frozenset if origin is frozenset else set
            self.allowed.add(kind)
            return converters.each(self.convert(args[0]) if args else None, kind, "a set")
        if origin in (list, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection):
            item = self.convert(args[0]) if args else None
            return None if item is None else converters.each(item, list, "a list")
        if origin in (dict, cabc.Mapping, cabc.MutableMapping):
            item = self.convert(args[1]) if len(args) == 2 else None
            return None if item is None else converters.dict_of(item)
        if isinstance(origin, type):  # a generic class: its own rules, unparameterised
            return self._class(origin)
        return None

    def _tuple(self, items: list[Convert | None], *, repeated: bool) -> Convert | None:
        # A tuple is stored as a list and, as everywhere in a run (SPEC: "a tuple result
        # is a list on both paths"), read back as one: its typed items are rebuilt. Only
        # a field of a class the code declares (a dataclass's, a NamedTuple's) is a tuple
        # again, so the rebuilt object equals the one the live pass stored.
        as_tuple = self._in_class > 0
        if not as_tuple and all(item is None for item in items):
            return None
        make = tuple if as_tuple else list
        if repeated:
            return converters.each(items[0], make, "a tuple")
        return converters.fixed(items, make)

    def _union(self, args: tuple[Any, ...]) -> Convert | None:
        optional = NONE_TYPE in args
        members = [arg for arg in args if arg is not NONE_TYPE]
        converts = [self.convert(arg) for arg in members]
        if all(convert is None for convert in converts):
            return None
        if len(members) == 1:
            only = converts[0]
            assert only is not None
            return converters.optional(only)
        return converters.union(members, converts, optional)

    def _class(self, cls: type) -> Convert | None:
        if cls in self._compiling:  # a recursive type: its converter, looked up late
            return self._late(cls)
        if cls in self._classes:
            return self._classes[cls]
        self._compiling.add(cls)
        try:
            convert = self._classes[cls] = self._class_now(cls)
        finally:
            self._compiling.discard(cls)
        return convert

    def _late(self, cls: type) -> Convert:
        def convert(data: Any, path: str, strict: bool) -> Any:
            real = self._classes[cls]
            assert real is not None
            return real(data, path, strict)

        return convert

    def _class_now(self, cls: type) -> Convert | None:
        if issubclass(cls, enum.Enum):
            self.allowed.add(cls)
            return converters.member_of(cls)
        if dataclasses.is_dataclass(cls):
            self.allowed.add(cls)
            hints = type_hints(cls)
            self._in_class += 1
            fields = [
                (
                    field.name,
                    self.convert(hints.get(field.name, Any)),
                    _required(field),
                    hints.get(field.name, Any),
                )
                for field in dataclasses.fields(cls)
                if field.init
            ]
            self._in_class -= 1
            return converters.dataclass(cls, fields)
        if serde.is_pydantic_class(cls):
            self.allowed.add(cls)
            return converters.pydantic(cls)
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple
            hints = type_hints(cls)
            self._in_class += 1
            items = [self.convert(hints.get(name, Any)) for name in cls._fields]
            self._in_class -= 1
            defaults = getattr(cls, "_field_defaults", {})
            return converters.named_tuple(cls, items, defaults)
        if typing.is_typeddict(cls):
            hints = type_hints(cls)
            keys = {name: self.convert(hint) for name, hint in hints.items()}
            required = frozenset(getattr(cls, "__required_keys__", hints))
            return converters.typed_dict(cls, keys, required)
        if cls in (set, frozenset):
            self.allowed.add(cls)
            return converters.each(None, cls, "a set")
        if cls is tuple:
            return self._tuple([None], repeated=True)
        return None


def type_hints(owner: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(owner, include_extras=True)
    except Exception as exc:  # a name only imported under TYPE_CHECKING, say
        _warn_unreadable(owner, exc)
        return {}


_warned: set[str] = set()


def _warn_unreadable(owner: Any, exc: Exception) -> None:
    name = f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', owner)}"
    if name in _warned:
        return
    _warned.add(name)
    logger.warning(
        "the annotations of %s cannot be evaluated (%s): its values are stored and read untyped",
        name,
        exc,
        extra={"event": "annotations_unreadable"},
    )


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
