"""Tagged JSON: how arguments, results and errors are stored.

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
import datetime as dt
import enum
import importlib
import json
import math
import re
import sys
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from everystep import failure_detail
from everystep.errors import EverystepError, StepFailure

TAG = "__es__"

SUPPORTED = (
    "None, bool, int, float (finite), str, list, tuple (stored as list), dict with str keys, "
    "datetime (naive or aware), date, timedelta, UUID, Decimal, bytes, Enum members"
)


# Arrays and objects nest at most this deep in a stored value: MariaDB's JSON columns
# refuse 32 levels (their CHECK (json_valid(...)) fails), so the same limit holds on
# every database and what runs on SQLite also runs on MariaDB. It also stops a cycle.
MAX_DEPTH = 31

# What no database stores as text: NUL (PostgreSQL's text and jsonb refuse it) and lone
# surrogates (what Python makes of bytes that are not UTF-8: no driver encodes them, and
# the JSON of MariaDB and PostgreSQL refuses their escapes).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_TO_ESCAPE = re.compile("[\\\\\x00\ud800-\udfff]")
_ESCAPED = re.compile(r"\\(\\|u[0-9a-f]{4})")


def storable_text(text: str, what: str) -> str:
    """``text`` if every database can store it as it is, else an ``EverystepError``
    naming ``what`` and the position. For names, ids and filters, which are matched as
    they are; values (arguments, results) are escaped instead."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return text
    where = f"{what} contains {_escape_char(found)} at position {found.start()}"
    if found.group() == "\x00":
        raise EverystepError(
            f"{where}: a NUL character, which PostgreSQL cannot store (refused on every database)"
        )
    raise EverystepError(f"{where}: a lone surrogate, so the text is not valid UTF-8")


def printable(text: str) -> str:
    """``text`` with what no database stores written as ``\\uXXXX``: for messages, which
    are shown and never turned back into values."""
    return _UNSTORABLE.sub(_escape_char, text)


# What a terminal or a text log line must not receive as it is: C0 controls (line breaks,
# ESC), DEL, C1 controls, the line and paragraph separators, the bidi overrides and
# isolates (which show text in another order than it is), and what ``printable`` escapes.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as Python writes it in a string
    literal (``\\n``, ``\\x1b``, ``\\u2028``; NUL and lone surrogates as ``printable``
    writes them): for a terminal or a line of a text log, where stored text must not
    start a line, move the cursor or reorder what follows."""
    if text.isprintable():  # the usual case, decided at C speed
        return text
    return _CONTROLS.sub(_escape_control, text)


def _escape_control(found: re.Match[str]) -> str:
    if _UNSTORABLE.match(found.group()):
        return _escape_char(found)
    return repr(found.group())[1:-1]


def _escape_char(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def _escape(text: str) -> str:
    # Backslashes are doubled, so `_unescape` tells an escape from the user's own text.
    return _TO_ESCAPE.sub(lambda m: "\\\\" if m.group() == "\\" else _escape_char(m), text)


def _unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: "\\" if m[1] == "\\" else chr(int(m[1][1:], 16)), text)


def _needs_escape(text: str) -> bool:
    if text.isascii() and "\x00" not in text:  # the usual case, decided at C speed
        return False
    return _UNSTORABLE.search(text) is not None


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
    """Turn ``value`` into plain JSON data every database stores, or raise
    ``EverystepError`` naming the type (or the problem) and the position."""
    return _encode(value, where, 0)


def _encode(value: Any, where: str, depth: int) -> Any:
    # ``depth``: how many lists and dicts of the stored form enclose ``value``.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _encode_str(value, where, depth)
    if isinstance(value, enum.Enum):
        return _encode_enum(value, where, depth)
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
        return [_encode(item, f"{where}[{i}]", inner) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return _encode_dict(value, where, depth)
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


def _encode_enum(value: enum.Enum, where: str, depth: int) -> dict[str, Any]:
    # Stored by member name: any member value works, and the class must be importable
    # by its qualified name or the value could never be read back.
    cls_name = qualified_name(type(value))
    if import_qualified(cls_name) is not type(value):
        raise EverystepError(
            f"cannot serialize enum member {value!r} at {where}: its class {cls_name} cannot "
            "be imported by that name (define enums at module level)"
        )
    _nested(where, depth + 1)
    return {TAG: "enum", "cls": cls_name, "name": _encode_str(value.name, where, depth + 1)}


def _encode_dict(value: dict[Any, Any], where: str, depth: int) -> dict[str, Any]:
    for key in value:
        if not isinstance(key, str):
            raise EverystepError(
                f"cannot serialize dict key of type {type(key).__name__!r} at {where}: "
                "only str keys survive JSON"
            )
    # A key that is the tag, or one no database stores, puts the dict in a "dict" tag
    # (one level deeper); unstorable keys are then escaped, every one of them.
    escaped = any(_needs_escape(key) for key in value)
    wrapped = escaped or TAG in value
    inner = _nested(where, depth + (2 if wrapped else 1))
    out = {
        (_escape(key) if escaped else key): _encode(item, f"{where}[{key!r}]", inner)
        for key, item in value.items()
    }
    if escaped:
        return {TAG: "dict", "keys": "escaped", "v": out}
    return {TAG: "dict", "v": out} if wrapped else out


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
    django_advice = _django_advice(value, where)
    if django_advice is not None:
        raise EverystepError(django_advice)
    raise EverystepError(
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
        cls = import_qualified(data["cls"])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise EverystepError(f"stored enum class {data['cls']!r} cannot be imported")
        return cls[decode(data["name"])]
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


def roundtrip(value: Any, where: str = "value") -> Any:
    """The value exactly as a replay would see it after storing it."""
    return decode(encode(value, where))


def encode_error(exc: BaseException) -> dict[str, Any]:
    """Store an exception as ``{type, message, args}``, and ``traceback`` (bounded text,
    see ``failure_detail``) if it was raised; an argument that cannot be serialized is
    stored as its ``repr()``."""
    # The args sit two levels down in the stored error: {"args": [...]}.
    args = [_encode_or_repr(arg, 2) for arg in exc.args]
    error = {
        "type": printable(qualified_name(type(exc))),
        "message": printable(str(exc)),
        "args": args,
    }
    trace = failure_detail.traceback_text(exc)
    if trace is not None:
        # Escaped before it is bounded: the escapes take room too.
        error["traceback"] = failure_detail.bounded(printable(trace))
    return error


def _encode_or_repr(value: Any, depth: int) -> Any:
    try:
        return _encode(value, "exception argument", depth)
    except EverystepError:
        return printable(repr(value))


def decode_error(data: dict[str, Any]) -> BaseException:
    """Rebuild a stored exception, or a ``StepFailure`` carrying its message when the
    type is gone or cannot be built from its stored args."""
    rebuilt = _rebuild_error(data)
    # Its traceback is the recorded one: the frames of a replay are not where it happened.
    failure_detail.recorded(rebuilt, data.get("traceback"))
    return rebuilt


def _rebuild_error(data: dict[str, Any]) -> BaseException:
    cls = import_qualified(data["type"])
    args = data.get("args")
    if isinstance(cls, type) and issubclass(cls, Exception) and args is not None:
        try:
            return cls(*decode(args))
        except Exception:  # any constructor signature we cannot satisfy
            pass
    message = data.get("message")
    return StepFailure(f"{data['type']}: {message}" if message else data["type"], data["type"])
