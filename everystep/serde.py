"""Tagged JSON: how arguments, results and errors are stored.

Plain JSON values are stored as they are. The extended types round-trip through a
small tagged object ``{"__es__": "<tag>", "v": ...}``; a user dict that happens to
use the tag key is itself wrapped, so no user data can be mistaken for a tag.

On a live pass the engine hands the body the *decoded stored form* of a step's result,
the value as a replay will rebuild it from the database, so a workflow body sees the
same thing on the first pass and after a resume (a tuple comes back as a list on both
paths). ``roundtrip`` gives that value for any input.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import importlib
import math
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from everystep.errors import EverystepError, StepFailure

TAG = "__es__"

SUPPORTED = (
    "None, bool, int, float (finite), str, list, tuple (stored as list), dict with str keys, "
    "datetime (naive or aware), date, timedelta, UUID, Decimal, bytes, Enum members"
)


def qualified_name(obj: Any) -> str:
    """``module.Qualname`` of a class or function: the name stored in the database."""
    return f"{obj.__module__}.{obj.__qualname__}"


def import_qualified(path: str) -> Any:
    """Resolve ``module.Qual.Name`` back to the object, trying the longest module prefix."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                target = getattr(target, attr)
        except AttributeError:
            return None
        return target
    return None


def encode(value: Any, where: str = "value") -> Any:
    """Turn ``value`` into plain JSON data, or raise ``EverystepError`` naming the type."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return _encode_enum(value, where)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EverystepError(f"cannot serialize non-finite float {value!r} at {where}")
        return value
    if isinstance(value, list | tuple):
        return [encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, where)
    return _encode_scalar(value, where)


def _encode_enum(value: enum.Enum, where: str) -> dict[str, Any]:
    # Stored by member name: any member value works, and the class must be importable
    # by its qualified name or the value could never be read back.
    cls_name = qualified_name(type(value))
    if import_qualified(cls_name) is not type(value):
        raise EverystepError(
            f"cannot serialize enum member {value!r} at {where}: its class {cls_name} cannot "
            "be imported by that name (define enums at module level)"
        )
    return {TAG: "enum", "cls": cls_name, "name": value.name}


def _encode_dict(value: dict[Any, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise EverystepError(
                f"cannot serialize dict key of type {type(key).__name__!r} at {where}: "
                "only str keys survive JSON"
            )
        out[key] = encode(item, f"{where}[{key!r}]")
    return {TAG: "dict", "v": out} if TAG in out else out


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
    raise EverystepError(
        f"cannot serialize value of type {type(value).__module__}.{type(value).__qualname__} "
        f"at {where}; supported types: {SUPPORTED}"
    )


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
        cls = import_qualified(data["cls"])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise EverystepError(f"stored enum class {data['cls']!r} cannot be imported")
        return cls[data["name"]]
    raw = data["v"]
    if tag == "dict":
        return {key: decode(item) for key, item in raw.items()}
    if tag == "datetime":
        value = dt.datetime.fromisoformat(raw)
        return value.astimezone(ZoneInfo(data["tz"])) if "tz" in data else value
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


def roundtrip(value: Any, where: str = "value") -> Any:
    """The value exactly as a replay would see it after storing it."""
    return decode(encode(value, where))


def encode_error(exc: BaseException) -> dict[str, Any]:
    """Store an exception as ``{type, message, args}``; an argument that cannot be
    serialized is stored as its ``repr()``."""
    args = [_encode_or_repr(arg) for arg in exc.args]
    return {"type": qualified_name(type(exc)), "message": str(exc), "args": args}


def _encode_or_repr(value: Any) -> Any:
    try:
        return encode(value, "exception argument")
    except EverystepError:
        return repr(value)


def decode_error(data: dict[str, Any]) -> BaseException:
    """Rebuild a stored exception, or a ``StepFailure`` carrying its message when the
    type is gone or cannot be built from its stored args."""
    cls = import_qualified(data["type"])
    args = data.get("args")
    if isinstance(cls, type) and issubclass(cls, Exception) and args is not None:
        try:
            return cls(*decode(args))
        except Exception:  # any constructor signature we cannot satisfy
            pass
    return StepFailure(f"{data['type']}: {data.get('message', '')}", data["type"])
