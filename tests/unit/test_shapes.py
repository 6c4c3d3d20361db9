"""``everystep.shapes``: annotations compiled into how a stored value is rebuilt."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any, Literal, NamedTuple, TypedDict

import pydantic
import pytest

from everystep import serde, shapes
from everystep.errors import IncompatibleValue, UnstorableValue


class Size(enum.Enum):
    S = 1
    L = 2


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)
    tags: tuple[str, ...] = ()


@dataclasses.dataclass
class Box:
    id: uuid.UUID
    price: Decimal
    made: dt.date
    size: Size


class Model(pydantic.BaseModel):
    when: dt.datetime
    size: Size


class Pair(NamedTuple):
    left: Box
    right: int = 0


class Counts(TypedDict):
    boxes: list[Box]


def roundtrip(value: Any, hint: Any) -> Any:
    shape = shapes.of(hint)
    return shapes.decode(shapes.encode(value, "v", shape), shape)


BOX = Box(uuid.UUID(int=7), Decimal("1.10"), dt.date(2026, 1, 2), Size.L)


@pytest.mark.parametrize("hint", [int, str, Any, dict[str, Any], list[int], str | None])
def test_a_plain_annotation_compiles_to_nothing(hint: Any) -> None:
    assert shapes.of(hint) is None


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (BOX, Box),
        (Node("a", [Node("b", [Node("c")])], ("x",)), Node),
        ([BOX, BOX], list[Box]),
        ({"k": BOX}, dict[str, Box]),
        (Pair(BOX), Pair),
        ({"boxes": [BOX]}, Counts),
        (Model(when=dt.datetime(2026, 1, 1, 12), size=Size.S), Model),
        ({Size.S, Size.L}, set[Size]),
        (frozenset({"a"}), frozenset[str]),
        (None, Box | None),
    ],
    ids=lambda v: type(v).__name__,
)
def test_typed_values_come_back_as_they_went(value: Any, hint: Any) -> None:
    assert roundtrip(value, hint) == value
    assert type(roundtrip(value, hint)) is type(value)


def test_a_tuple_is_a_list_except_a_field_a_class_declares() -> None:
    assert roundtrip((BOX, 1), tuple[Box, int]) == [BOX, 1]
    assert roundtrip(Node("a", tags=("x", "y")), Node).tags == ("x", "y")


def test_a_union_is_told_apart_by_its_literal_fields() -> None:
    @dataclasses.dataclass
    class Cat:
        kind: Literal["cat"]
        name: str

    @dataclasses.dataclass
    class Dog:
        kind: Literal["dog"]
        name: str

    pets = [Dog("dog", "rex"), Cat("cat", "tom")]
    assert roundtrip(pets, list[Cat | Dog]) == pets


def test_a_field_reads_the_json_text_of_its_type() -> None:
    sent = {"id": str(BOX.id), "price": "1.10", "made": "2026-01-02", "size": 2}
    assert shapes.of(Box).rebuild(sent) == BOX


def test_a_value_no_annotation_names_is_refused() -> None:
    with pytest.raises(UnstorableValue, match="-> Box"):
        serde.encode(BOX, "result of step 1")
    with pytest.raises(UnstorableValue, match="a set"):
        shapes.encode({Size.S}, "v", shapes.of(list[Size]))


def test_a_stored_field_of_the_wrong_type_no_longer_fits() -> None:
    with pytest.raises(IncompatibleValue, match="price"):
        shapes.of(Box).rebuild({"id": str(BOX.id), "price": [], "made": "2026-01-02", "size": 1})


def test_signatures_shape_arguments_and_returns() -> None:
    def body(box: Box, n: int, *rest: Node) -> list[Box]:
        return [box]

    sig = shapes.signature(body)
    assert sig.argument(1) is None and sig.argument(5) is shapes.of(Node)
    assert sig.returns is shapes.of(list[Box])
    stored = shapes.encode_arguments(body, [BOX, 1, Node("n")], "arguments")
    assert shapes.decode_arguments(body, stored, "w") == [BOX, 1, Node("n")]
