"""Values typed by the code: the annotations of a step's return, a workflow's parameters
and return, a task's parameters and return, and the ``type=`` of an awaited event decide
how a stored value is rebuilt.

A ``Shape`` is one annotation compiled once: which classes a value stored under it may
hold (its ``allowed``: dataclasses, pydantic models, sets and Enums, which the stored-value
codec keeps as plain JSON only where an annotation names them), and how to rebuild such a
value from its stored form (``rebuild``). Rebuilt are dataclasses (nested, frozen, with
defaults), pydantic v2 models, ``TypedDict``, ``NamedTuple``, Enum members, tuples and
sets, and the lists, dicts and unions of them (``Order | None``, a union told apart by
``Literal`` fields).

The class comes from the annotation, never from the row: nothing is imported, and no
stored name is looked up to rebuild a typed value. An annotation that holds none of these
(a plain `int`, `dict[str, Any]`, no annotation) compiles to None: the value is stored
and read as before, at no extra cost.

A stored value that no longer fits its annotation (a field added without a default, a
renamed Enum member, a field whose type changed) is an ``IncompatibleValue``: a replay
fails the run as a code change does, and ``everystep_check_replay`` reports such records
before a deploy (docs/typed-values.md). A change that fits: a field added with a default
takes it; a stored field the class no longer has is ignored.

- ``converters``: what a shape is made of, one converter per kind of annotation;
- ``compiled``: an annotation compiled into a ``Shape`` (cached per annotation);
- ``signatures``: a function's annotations as shapes, and storing and reading a value,
  or a run's arguments, through them.

pydantic is never imported here: a value is a pydantic model only if pydantic is loaded.
"""

from everystep.shapes.compiled import Shape, of
from everystep.shapes.converters import describe
from everystep.shapes.signatures import (
    Signature,
    decode,
    decode_arguments,
    decode_call,
    encode,
    encode_arguments,
    encode_call,
    returns,
    signature,
)

__all__ = [
    "Shape",
    "Signature",
    "decode",
    "decode_arguments",
    "decode_call",
    "describe",
    "encode",
    "encode_arguments",
    "encode_call",
    "of",
    "returns",
    "signature",
]
