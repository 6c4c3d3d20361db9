"""Workflows and steps whose code names the Enum and exception classes a worker may
rebuild from a stored value (``everystep.stored_types``): by annotation, by a name in
the body, one attribute deep (``Catalog.Missing``, ``json.JSONDecodeError``), through a
helper function of this module, and as a loaded subclass of a named exception type.
``Stray`` is named by nothing, so it is never rebuilt from a row."""

from __future__ import annotations

import enum
import json
from typing import Any

from everystep import step, wait_for, workflow

ECHO = "stored-types.echo"
WAITS = "stored-types.waits"
CHARGES = "stored-types.charges"


class Flavour(enum.Enum):
    """Named only by a workflow's annotation."""

    SWEET = "sweet"


class Size(enum.Enum):
    """Named only in a step's body."""

    SMALL = 1


class PaymentError(Exception):
    """Named by ``charge``'s ``except`` clause."""


class CardDeclined(PaymentError):
    """Named by no function: allowed as a loaded subclass of ``PaymentError``."""


class Catalog:
    """Holds an exception class, named as ``Catalog.Missing``."""

    class Missing(Exception):
        """Named one attribute deep."""


class Refused(Exception):
    """Named only by ``_refuse``, a helper a step calls."""


class Stray(Exception):
    """Named by nothing: never rebuilt from a row."""


ERRORS: dict[str, type[Exception]] = {"declined": CardDeclined}


@step
def pass_through(value: Any) -> Any:
    """Returns its argument: the step's recorded args and result hold it."""
    return value


@step
def pick_size(name: str) -> Any:
    return Size[name]


@step
def lookup(sku: str) -> Any:
    raise Catalog.Missing(sku)


@step
def parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise


def _refuse(reason: str) -> None:
    raise Refused(reason)


@step
def check(reason: str) -> None:
    _refuse(reason)


@step
def charge(kind: str) -> None:
    try:
        raise ERRORS[kind](kind)
    except PaymentError:
        raise


@workflow(name=ECHO)
def echo_value(value: Any, flavour: Flavour | None = None) -> Any:
    """The stored value, handed to a step and back: what the body got from its args."""
    return pass_through(value)


@workflow(name=WAITS)
def waits_for_payload() -> Any:
    """The payload of the event ``payload``, as the body got it."""
    return wait_for("payload")


@workflow(name=CHARGES)
def charges(kind: str) -> str:
    """Catches the step's PaymentError by its base: only an error rebuilt as its own
    type is caught; a StepFailure fails the run."""
    try:
        charge(kind)
    except PaymentError as exc:
        return f"caught {type(exc).__name__}"
    return "not raised"
