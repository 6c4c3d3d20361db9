"""Tagged JSON: how arguments, results and event payloads are stored (an exception's
stored form is ``everystep.stored_errors``; text made safe to store or show is
``everystep.safe_text``).

Plain JSON values are stored as they are. The extended types round-trip through a
small tagged object ``{"__es__": "<tag>", "v": ...}``; a user dict that happens to
use the tag key is itself wrapped, so no user data can be mistaken for a tag.

On a live pass the engine hands the body the *decoded stored form* of a step's result,
the value as a replay will rebuild it from the database, so a workflow body sees the
same thing on the first pass and after a resume (a tuple comes back as a list on both
paths). ``roundtrip`` gives that value for any input.

Every stored value is one every database takes, so a workflow behaves the same on
SQLite, PostgreSQL and MariaDB: a string holding a NUL character or a lone surrogate
(which PostgreSQL, MariaDB's JSON check or the drivers refuse) is stored escaped in a
``str`` tag, a dict with such a key in a ``dict`` tag with escaped keys, and lists and
dicts may nest at most ``MAX_DEPTH`` levels (MariaDB's JSON limit). Ordinary strings
are stored as they are.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import math
import re
import sys
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from everystep import stored_types
from everystep.errors import EverystepError, UnstorableValue
from everystep.safe_text import UNSTORABLE, escape_char

TAG = "__es__"

SUPPORTED = (
    "None, bool, int, float (finite), str, list, tuple (stored as list), dict with str keys, "
    "datetime (naive or aware), date, timedelta, UUID, Decimal, bytes, Enum members; "
    "dataclasses, pydantic models and sets where an annotation names their type"
)


class _AnyClass(frozenset):
    """Allows every typed value (``EVERYTHING``): a value no annotation will rebuild, kept
    for show (a step's arguments) or rebuilt by its reader (an event's payload)."""

    def __contains__(self, item: object) -> bool:
        return True

    def __bool__(self) -> bool:
        return True


# The classes of typed values (dataclasses, pydantic models, sets) a stored value may hold,
# which an annotation names (``everystep.shapes``): none, or any.
NOTHING: frozenset[type] = frozenset()
EVERYTHING: frozenset[type] = _AnyClass()


# Arrays and objects nest at most this deep in a stored value: MariaDB's JSON columns
# refuse 32 levels (their CHECK (json_valid(...)) fails), so the same limit holds on
# every database and what runs on SQLite also runs on MariaDB. It also stops a cycle.
MAX_DEPTH = 31

_TO_ESCAPE = re.compile("[\\\\\x00\ud800-\udfff]")
_ESCAPED = re.compile(r"\\(\\|u[0-9a-f]{4})")


def _escape(text: str) -> str:
    # Backslashes are doubled, so `_unescape` tells an escape from the user's own text.
    return _TO_ESCAPE.sub(lambda m: "\\\\" if m.group() == "\\" else escape_char(m), text)


def _unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: "\\" if m[1] == "\\" else chr(int(m[1][1:], 16)), text)


def _needs_escape(text: str) -> bool:
    if text.isascii() and "\x00" not in text:  # the usual case, decided at C speed
        return False
    return UNSTORABLE.search(text) is not None


def qualified_name(obj: Any) -> str:
    """``module.Qualname`` of a class or function: the name stored in the database."""
    return f"{obj.__module__}.{obj.__qualname__}"


def encode(value: Any, where: str = "value", allowed: frozenset[type] = NOTHING) -> Any:
    """Turn ``value`` into plain JSON data every database stores, or raise
    ``EverystepError`` naming the type (or the problem) and the position: for a type it
    cannot store, ``UnstorableValue``, a ``TypeError`` too, as ``json.dumps`` raises.
    Dataclasses, pydantic models and sets are stored (as objects and lists) only if their
    class is ``allowed``: an annotation names it, so it is rebuilt (``everystep.shapes``)."""
    return _encode(value, where, 0, allowed)


def encode_nested(value: Any, where: str, depth: int) -> Any:
    """``encode`` of a value found ``depth`` levels down in a stored value (the
    nesting limit counts from the top)."""
    return _encode(value, where, depth, NOTHING)


def _encode(value: Any, where: str, depth: int, allowed: frozenset[type]) -> Any:
    # ``depth``: how many lists and dicts of the stored form enclose ``value``.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _encode_str(value, where, depth)
    if isinstance(value, enum.Enum):
        return _encode_enum(value, where, depth, type(value) in allowed)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EverystepError(f"cannot serialize non-finite float {value!r} at {where}")
        if _exponent_or_negative_zero(value):
            _nested(where, depth + 1)
            return {TAG: "float", "v": repr(value)}
        return value
    if isinstance(value, list | tuple):
        inner = _nested(where, depth + 1)
        return [_encode(item, f"{where}[{i}]", inner, allowed) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, where, depth, allowed)
    if allowed and type(value) in allowed:
        typed = _typed_form(value, where)
        if typed is not None:
            return _encode(typed, where, depth, allowed)
    tagged = _encode_scalar(value, where)
    _nested(where, depth + (2 if isinstance(tagged["v"], list) else 1))
    return tagged


def _exponent_or_negative_zero(value: float) -> bool:
    # PostgreSQL's jsonb keeps numbers as `numeric`: 1e+16 comes back as the int
    # 10000000000000000 and -0.0 as 0. Those floats are stored tagged, so a replay hands
    # the body the float the live pass saw. Every other float's repr survives as is.
    return (value == 0.0 and math.copysign(1.0, value) < 0) or "e" in repr(value)


def _nested(where: str, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise EverystepError(
            f"cannot serialize {where}: lists, dicts and tagged values nest more than "
            f"{MAX_DEPTH} levels deep there (the most MariaDB's JSON stores; a cycle?)"
        )
    return depth


def _encode_str(value: str, where: str, depth: int) -> Any:
    if not _needs_escape(value):
        return value
    _nested(where, depth + 1)
    return {TAG: "str", "v": _escape(value)}


def _encode_enum(value: enum.Enum, where: str, depth: int, annotated: bool) -> dict[str, Any]:
    # Stored by member name: any member value works. Unless an annotation names the
    # class (it is rebuilt from that, ``everystep.shapes``), the class must be found by
    # its qualified name in an imported module (not __main__) or no process could read
    # the value back; storing it also allows this process to rebuild it.
    cls_name = qualified_name(type(value))
    if not stored_types.remember(type(value)) and not annotated:
        raise EverystepError(
            f"cannot serialize enum member {value!r} at {where}: its class {cls_name} cannot "
            "be imported by that name (define enums at module level, in an importable "
            "module, not in __main__)"
        )
    _nested(where, depth + 1)
    return {TAG: "enum", "cls": cls_name, "name": _encode_str(value.name, where, depth + 1)}


def _encode_dict(
    value: dict[Any, Any], where: str, depth: int, allowed: frozenset[type]
) -> dict[str, Any]:
    for key in value:
        if not isinstance(key, str):
            raise UnstorableValue(
                f"cannot serialize dict key of type {type(key).__name__!r} at {where}: "
                "only str keys survive JSON"
            )
    # A key that is the tag, or one no database stores, puts the dict in a "dict" tag
    # (one level deeper); unstorable keys are then escaped, every one of them.
    escaped = any(_needs_escape(key) for key in value)
    wrapped = escaped or TAG in value
    inner = _nested(where, depth + (2 if wrapped else 1))
    out = {
        (_escape(key) if escaped else key): _encode(item, f"{where}[{key!r}]", inner, allowed)
        for key, item in value.items()
    }
    if escaped:
        return {TAG: "dict", "keys": "escaped", "v": out}
    return {TAG: "dict", "v": out} if wrapped else out


def _typed_form(value: Any, where: str) -> Any:
    """A typed value's plain form (a dict of a dataclass's fields, a pydantic model's
    JSON form, a set's list), which ``_encode`` then stores; None if ``value`` is none."""
    # A model first: asking a pydantic model whether it is a dataclass goes through its
    # metaclass's __getattr__ and an AttributeError.
    if is_pydantic_class(type(value)):
        try:
            # pydantic's own round trip: its JSON form, by alias, validated back.
            return value.model_dump(mode="json", by_alias=True)
        except Exception as exc:  # pydantic's PydanticSerializationError
            raise UnstorableValue(f"cannot serialize {where}: pydantic refused it: {exc}") from exc
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # The fields its constructor takes: a rebuild passes them back to it.
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)  # the same stored form in every process
        except TypeError:
            return list(value)
    return None


def is_pydantic_class(cls: type) -> bool:
    """Whether ``cls`` is a pydantic model (only if pydantic is loaded: not imported)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


def _typed_kind(value: Any) -> str | None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "a dataclass"
    if is_pydantic_class(type(value)):
        return "a pydantic model"
    if isinstance(value, set | frozenset):
        return "a set"
    return None


def _encode_scalar(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dt.datetime):
        tagged: dict[str, Any] = {TAG: "datetime", "v": value.isoformat()}
        if isinstance(value.tzinfo, ZoneInfo) and value.tzinfo.key is not None:
            tagged["tz"] = value.tzinfo.key
        return tagged
    if isinstance(value, dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, bytes | bytearray):
        return {TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    kind = _typed_kind(value)
    if kind is not None:
        name = type(value).__qualname__
        raise UnstorableValue(
            f"cannot serialize value of type {qualified_name(type(value))} at {where}: "
            f"{kind} is stored only where the code's annotation names its type, so that every "
            f"replay rebuilds it as the live pass saw it: annotate it (`-> {name}` on the "
            f"step or workflow, `{name}` on the parameter, `wait_for(..., type={name})`), "
            f"or pass plain data; supported types: {SUPPORTED}"
        )
    django_advice = _django_advice(value, where)
    if django_advice is not None:
        raise UnstorableValue(django_advice)
    raise UnstorableValue(
        f"cannot serialize value of type {type(value).__module__}.{type(value).__qualname__} "
        f"at {where}; supported types: {SUPPORTED}"
    )


def _django_advice(value: Any, where: str) -> str | None:
    """What to store instead of a Django model instance or queryset, the values people
    most often try to pass between steps; None for anything else."""
    # Looked up, not imported: ``import everystep`` must not import Django, and a value
    # can only be a model instance once Django's models are loaded.
    models = sys.modules.get("django.db.models")
    if models is None:
        return None
    cls = type(value)
    if isinstance(value, models.Model):
        var = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        if where.startswith("result of step"):
            instead = "return its primary key ({}.pk) and load it again in the next step"
        elif where.startswith("result of"):
            instead = "return its primary key ({}.pk) instead"
        else:
            instead = "pass its primary key ({}.pk) and load it again in the step that uses it"
        return (
            f"{where} is a {cls.__name__} model instance ({qualified_name(cls)}), which "
            f"cannot be stored: {instead.format(var)}, e.g. {cls.__name__}.objects.get(pk=...)"
        )
    if isinstance(value, models.QuerySet):
        return (
            f"{where} is a QuerySet of {value.model.__name__}, which cannot be stored: "
            "use a list of primary keys instead (list(queryset.values_list('pk', flat=True)))"
        )
    return None


def decode(data: Any) -> Any:
    """Rebuild a value stored by ``encode``."""
    if isinstance(data, list):
        return [decode(item) for item in data]
    if isinstance(data, dict):
        tag = data.get(TAG)
        if tag is None:
            return {key: decode(item) for key, item in data.items()}
        return _decode_tagged(tag, data)
    return data


def _decode_tagged(tag: str, data: dict[str, Any]) -> Any:
    if tag == "enum":
        return _decode_enum(data)
    raw = data["v"]
    if tag == "str":
        return _unescape(raw)
    if tag == "dict":
        key = _unescape if data.get("keys") == "escaped" else str
        return {key(name): decode(item) for name, item in raw.items()}
    if tag == "datetime":
        value = dt.datetime.fromisoformat(raw)
        return _in_zone(value, ZoneInfo(data["tz"])) if "tz" in data else value
    if tag == "float":
        return float(raw)
    if tag == "date":
        return dt.date.fromisoformat(raw)
    if tag == "timedelta":
        return dt.timedelta(days=raw[0], seconds=raw[1], microseconds=raw[2])
    if tag == "uuid":
        return uuid.UUID(raw)
    if tag == "decimal":
        return Decimal(raw)
    if tag == "bytes":
        return base64.b64decode(raw)
    raise EverystepError(f"unknown serialization tag {tag!r}")


def _decode_enum(data: dict[str, Any]) -> Any:
    """The member a stored enum names, if its class is allowed (``stored_types``) and has
    that member; else the stored tagged dict as it is, so an unknown class named in a
    row neither imports its module nor fails the work that reads the value."""
    cls = stored_types.resolve_enum(data.get("cls"))
    name = decode(data.get("name"))
    if cls is not None and isinstance(name, str) and name in cls.__members__:
        return cls.__members__[name]
    stored_types.warn_unknown("enum", data.get("cls"), "its stored form")
    return data


def _in_zone(value: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """``value`` (stored as wall time and offset) in ``zone``: the same wall time, with the
    fold that gives the stored offset. Not through UTC, which overflows at the ends of the
    calendar (year 1, year 9999)."""
    for fold in (0, 1):
        local = value.replace(tzinfo=zone, fold=fold)
        if local.utcoffset() == value.utcoffset():
            return local
    return value.astimezone(zone)


def parse_json(text: str, what: str) -> Any:
    """Operator input (a settled result, an event payload) parsed as JSON, else an
    ``EverystepError`` naming ``what``. Whether the value can be stored (depth, NaN) is
    ``encode``'s check."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EverystepError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # the parser's own limit, far above MAX_DEPTH
        raise EverystepError(f"{what} nests too deeply to be stored") from None
    except ValueError as exc:
        # Python's cap on the digits of an int it converts from text (4,300 by default):
        # a plain ValueError, not a JSONDecodeError.
        raise EverystepError(f"{what} holds a number too long to read: {exc}") from None


def stored_object(data: Any) -> dict[str, Any] | None:
    """The keys of a stored dict, each with its value still stored; None if ``data`` is
    not a stored dict."""
    if not isinstance(data, dict):
        return None
    tag = data.get(TAG)
    if tag is None:
        return data
    if tag != "dict":
        return None
    raw: dict[str, Any] = data["v"]
    return {_unescape(key): item for key, item in raw.items()} if data.get("keys") else raw


def roundtrip(value: Any, where: str = "value") -> Any:
    """The value exactly as a replay would see it after storing it."""
    return decode(encode(value, where))
