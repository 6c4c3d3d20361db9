"""The converters a ``Shape`` is compiled into: each takes a stored form, the path to
it (for the message) and ``strict`` (a union's first try: no unknown fields), and gives
the value the annotation names, or raises ``Mismatch`` saying where and why it no longer
fits."""

from __future__ import annotations

import datetime as dt
import enum
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from everystep import serde

NONE_TYPE = type(None)

Convert = Callable[[Any, str, bool], Any]  # (stored form, path, strict) -> value

# Leaf classes a rebuilt value is checked against inside a typed value: a field typed
# ``str`` holding a number no longer fits (``int`` fits ``float``, as in Python's typing).
_LEAVES: dict[type, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
    bytes: (bytes,),
    Decimal: (Decimal,),
    uuid.UUID: (uuid.UUID,),
    dt.datetime: (dt.datetime,),
    dt.date: (dt.date,),
    dt.timedelta: (dt.timedelta,),
    list: (list,),
    dict: (dict,),
}


class Mismatch(Exception):
    """Raised inside ``rebuild`` where the stored form does not fit; the message says where
    and why (the caller wraps it in ``IncompatibleValue``)."""


def describe(hint: Any) -> str:
    """An annotation as a reader writes it."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


def _at(path: str) -> str:
    return f" at {path}" if path else ""


def plain(data: Any) -> Any:
    return serde.decode(data)


def _unwrapped(data: Any, path: str, what: str) -> dict[str, Any]:
    """A stored object's keys and stored values."""
    stored = serde.stored_object(data)
    if stored is None:
        kind = data.get(serde.TAG) if isinstance(data, dict) else type(data).__name__
        raise Mismatch(f"{what} stored as {kind!r}, not an object{_at(path)}")
    return stored


def literal(values: tuple[Any, ...]) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        value = plain(data)
        if value not in values:
            raise Mismatch(f"{value!r} is none of {list(values)!r}{_at(path)}")
        return value

    return convert


def optional(inner: Convert) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        return None if data is None else inner(data, path, strict)

    return convert


def union(members: list[Any], converts: list[Convert | None], nullable: bool) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        if data is None and nullable:
            return None
        # First the member that fits exactly (no unknown fields), then the first that
        # fits at all: a record stored before a field was removed still finds its class.
        problems: list[str] = []
        for exact in (True, False):
            for member, inner in zip(members, converts, strict=True):
                try:
                    if inner is None:
                        return leaf(member, plain(data), path)
                    return inner(data, path, exact)
                except Mismatch as exc:
                    if not exact:
                        problems.append(f"{describe(member)}: {exc}")
        raise Mismatch(f"no member of the union fits{_at(path)} ({'; '.join(problems)})")

    return convert


# A field's value as JSON gives it (an event sent as JSON, a task's arguments), read as
# the type the field declares: the text of a Decimal, a UUID, a date or a datetime.
_FROM_JSON: dict[type, Callable[[Any], Any]] = {
    Decimal: lambda value: Decimal(str(value)),
    uuid.UUID: uuid.UUID,
    dt.datetime: dt.datetime.fromisoformat,
    dt.date: dt.date.fromisoformat,
}


def leaf(hint: Any, value: Any, path: str) -> Any:
    """``value`` if it is what a field annotated ``hint`` holds, the JSON form of one
    read as one, else a ``Mismatch``."""
    classes = _LEAVES.get(hint)
    if classes is None:
        return value
    if isinstance(value, classes) and (bool in classes or not isinstance(value, bool)):
        return value
    parse = _FROM_JSON.get(hint)
    json_form = isinstance(value, str) or (hint is Decimal and type(value) in (int, float))
    if parse is not None and json_form:
        try:
            return parse(value)
        except (ValueError, ArithmeticError):
            pass
    raise Mismatch(f"{value!r} is not a {describe(hint)}{_at(path)}")


def each(item: Convert | None, make: type, what: str) -> Convert:
    """A list, ``tuple[T, ...]`` or set stored as a list: each entry rebuilt by ``item``
    (None: read as stored), the whole made a ``make``; ``what`` names it in a message."""

    def convert(data: Any, path: str, strict: bool) -> Any:
        if not isinstance(data, list):
            raise Mismatch(f"{what} expected, {type(data).__name__} stored{_at(path)}")
        if item is None:
            return make(plain(data))
        return make(item(entry, f"{path}[{i}]", strict) for i, entry in enumerate(data))

    return convert


def fixed(items: list[Convert | None], make: type) -> Convert:
    """``tuple[A, B]``, made a ``tuple`` or a ``list``."""

    def convert(data: Any, path: str, strict: bool) -> Any:
        if not isinstance(data, list) or len(data) != len(items):
            raise Mismatch(f"a tuple of {len(items)} expected{_at(path)}")
        return make(
            plain(entry) if inner is None else inner(entry, f"{path}[{i}]", strict)
            for i, (inner, entry) in enumerate(zip(items, data, strict=True))
        )

    return convert


def dict_of(item: Convert) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        stored = _unwrapped(data, path, "a dict")
        return {key: item(value, f"{path}[{key!r}]", strict) for key, value in stored.items()}

    return convert


def member_of(cls: type[enum.Enum]) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        # The member is taken by the name stored, from the class the code names; the
        # class named in the row is not looked at (a class that moved still rebuilds).
        if isinstance(data, dict) and data.get(serde.TAG) == "enum":
            name = serde.decode(data.get("name"))
            if isinstance(name, str) and name in cls.__members__:
                return cls.__members__[name]
            raise Mismatch(
                f"{cls.__qualname__} has no member {name!r}{_at(path)} (renamed? keep the "
                "old name as an alias: OLD = NEW's value)"
            )
        try:  # a member's value, as pydantic and a sender's JSON give it
            return cls(plain(data))
        except ValueError:
            raise Mismatch(f"{data!r} is not a {cls.__qualname__}{_at(path)}") from None

    return convert


def dataclass(cls: type, fields: list[tuple[str, Convert | None, bool, Any]]) -> Convert:
    """``fields``: each init field's name, converter (None: plain), whether it is
    required (no default) and its annotation."""
    known = frozenset(name for name, _, _, _ in fields)

    def convert(data: Any, path: str, strict: bool) -> Any:
        stored = _unwrapped(data, path, cls.__qualname__)
        if strict and not known.issuperset(stored):
            extra = sorted(set(stored) - known)
            raise Mismatch(f"{cls.__qualname__} has no field {extra[0]!r}{_at(path)}")
        values: dict[str, Any] = {}
        for name, inner, required, hint in fields:
            if name not in stored:
                if required:
                    raise Mismatch(
                        f"{cls.__qualname__}.{name} is missing and has no default{_at(path)}"
                    )
                continue  # added since: its default
            where = f"{path}.{name}" if path else name
            if inner is None:
                values[name] = leaf(hint, plain(stored[name]), where)
            else:
                values[name] = inner(stored[name], where, strict)
        try:
            return cls(**values)
        except Exception as exc:  # its __post_init__ refuses the old values
            raise Mismatch(f"{cls.__qualname__}(...) raised {exc!r}{_at(path)}") from None

    return convert


def pydantic(cls: Any) -> Convert:
    fields = cls.model_fields

    def names(data: dict[str, Any]) -> set[str]:
        known = set(fields)
        known.update(field.alias for field in fields.values() if field.alias)
        return set(data) - known

    def convert(data: Any, path: str, strict: bool) -> Any:
        value = plain(data)
        if strict and isinstance(value, dict) and names(value):
            raise Mismatch(f"{cls.__qualname__} has no field {sorted(names(value))[0]!r}")
        try:
            return cls.model_validate(value)
        except Exception as exc:  # pydantic's ValidationError
            first = str(exc).splitlines()
            raise Mismatch(
                f"{cls.__qualname__} does not validate{_at(path)}: {' '.join(first[:3])}"
            ) from None

    return convert


def named_tuple(cls: Any, items: list[Convert | None], defaults: dict[str, Any]) -> Convert:
    names = cls._fields

    def convert(data: Any, path: str, strict: bool) -> Any:
        if not isinstance(data, list):
            raise Mismatch(f"{cls.__qualname__} stored as {type(data).__name__}{_at(path)}")
        if len(data) > len(names):
            raise Mismatch(f"{cls.__qualname__} has {len(names)} fields, {len(data)} stored")
        missing = [name for name in names[len(data) :] if name not in defaults]
        if missing:
            raise Mismatch(f"{cls.__qualname__}.{missing[0]} is missing and has no default")
        values = [
            plain(entry) if inner is None else inner(entry, f"{path}[{i}]", strict)
            for i, (inner, entry) in enumerate(zip(items, data, strict=False))
        ]
        return cls(*values)

    return convert


def typed_dict(cls: Any, keys: dict[str, Convert | None], required: frozenset[str]) -> Convert:
    def convert(data: Any, path: str, strict: bool) -> Any:
        stored = _unwrapped(data, path, cls.__qualname__)
        missing = sorted(required - set(stored))
        if missing:
            raise Mismatch(f"{cls.__qualname__}[{missing[0]!r}] is missing{_at(path)}")
        if strict and not set(keys).issuperset(stored):
            raise Mismatch(f"{cls.__qualname__} has no key {sorted(set(stored) - set(keys))[0]!r}")
        out = {}
        for key, value in stored.items():
            inner = keys.get(key)
            out[key] = plain(value) if inner is None else inner(value, f"{path}[{key!r}]", strict)
        return out

    return convert
