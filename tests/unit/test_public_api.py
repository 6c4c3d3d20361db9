"""The public surface of ``everystep``: lazy imports, registration, plain calls, errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import everystep
from everystep import api, context, errors, registry, stored_types
from everystep.errors import EverystepError

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_import_everystep_does_not_import_django() -> None:
    """``import everystep`` in a fresh interpreter leaves Django unimported."""
    proc = run_python(
        "import sys\n"
        "import everystep\n"
        "assert 'everystep' in sys.modules\n"
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_subprocess_check_can_see_django_when_imported() -> None:
    """Control for the check above: importing Django is visible in the same way."""
    proc = run_python(
        "import sys\nimport everystep\nimport django\nprint('django' in sys.modules)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_public_names_are_exported() -> None:
    """``__all__`` lists exactly the public API, durable waits, ``send``, the patch
    functions, composition, ``fork``, the async twins and progress included."""
    assert sorted(everystep.__all__) == [
        "Terminal",
        "acancel",
        "agather",
        "aresult",
        "aschedule",
        "asend",
        "asleep",
        "asleep_until",
        "astart",
        "await_for",
        "awatch",
        "cancel",
        "deprecate_patch",
        "fork",
        "gather",
        "parallel",
        "patched",
        "publish",
        "published",
        "register_type",
        "result",
        "schedule",
        "send",
        "sleep",
        "sleep_until",
        "start",
        "step",
        "wait_for",
        "watch",
        "workflow",
    ]
    for name in everystep.__all__:
        assert getattr(everystep, name) is not None


def test_public_names_resolve_to_the_api_objects() -> None:
    """Each lazily exported name is the object defined in api / errors."""
    assert everystep.Terminal is errors.Terminal
    assert everystep.register_type is stored_types.register_type
    assert everystep.workflow is api.workflow
    assert everystep.step is api.step
    assert everystep.parallel is api.parallel
    assert everystep.schedule is api.schedule


def test_from_import_of_public_names_works() -> None:
    """``from everystep import ...`` works for every exported name."""
    from everystep import Terminal, parallel, schedule, step, workflow

    assert all(callable(obj) for obj in (Terminal, parallel, schedule, step, workflow))


def test_unknown_attribute_is_attribute_error() -> None:
    """An unknown name on the package raises AttributeError."""
    with pytest.raises(AttributeError, match="no_such_name"):
        everystep.no_such_name  # noqa: B018


def test_workflow_registers_under_module_qualname() -> None:
    """Bare ``@workflow`` registers the function under ``module.qualname``."""

    @everystep.workflow
    def body(x: int) -> int:
        return x + 1

    expected = f"{__name__}.test_workflow_registers_under_module_qualname.<locals>.body"
    assert expected.startswith("tests.unit.test_public_api.")
    defn = registry.lookup(expected)
    assert defn is not None
    assert defn.fn is body
    assert defn.name == expected
    assert registry.workflow_def(body) is defn


def test_workflow_with_explicit_name_registers_under_that_name() -> None:
    """``@workflow(name=...)`` registers under the given name, not the qualname."""

    @everystep.workflow(name="unit-tests.explicit-name")
    def renamed() -> str:
        return "done"

    defn = registry.lookup("unit-tests.explicit-name")
    assert defn is not None
    assert defn.fn is renamed
    qualname = f"{__name__}.test_workflow_with_explicit_name_registers_under_that_name"
    assert registry.lookup(f"{qualname}.<locals>.renamed") is None


def test_workflow_called_directly_is_a_plain_call() -> None:
    """A decorated workflow is the function itself: calling it just runs it."""
    calls: list[tuple[Any, ...]] = []

    def body(a: int, b: int = 2) -> int:
        calls.append((a, b))
        return a * b

    decorated = everystep.workflow(name="unit-tests.plain-call")(body)
    assert decorated is body
    assert decorated(3, b=4) == 12
    assert calls == [(3, 4)]


def test_step_called_directly_is_a_plain_call_and_drops_everystep_id() -> None:
    """Outside a run a step runs its body; ``everystep_id=`` is consumed, never passed on."""
    received: list[dict[str, Any]] = []

    @everystep.step
    def add(a: int, b: int, **kwargs: Any) -> int:
        received.append(kwargs)
        return a + b

    assert add(1, 2) == 3
    assert add(1, b=5, everystep_id="named-add") == 6
    assert add(2, 2, extra="kept") == 4
    assert received == [{}, {}, {"extra": "kept"}]
    assert add.__name__ == "add"


def test_unsafe_step_called_directly_is_a_plain_call() -> None:
    """``@step(unsafe_to_repeat=True)`` outside a run is a plain call too."""
    effects: list[int] = []

    @everystep.step(unsafe_to_repeat=True)
    def charge(amount: int) -> str:
        effects.append(amount)
        return f"charged {amount}"

    charged = charge(10, everystep_id="charge")
    assert charged == "charged 10"
    assert charge(20) == "charged 20"
    assert effects == [10, 20]


def test_step_exception_propagates_on_plain_call() -> None:
    """A step body's exception propagates unchanged outside a run."""
    boom = ValueError("boom")

    @everystep.step
    def fails() -> None:
        raise boom

    with pytest.raises(ValueError) as info:
        fails(everystep_id="fails")
    assert info.value is boom


def test_different_function_under_existing_name_is_refused() -> None:
    """Registering another function under a taken explicit name raises EverystepError."""

    @everystep.workflow(name="unit-tests.taken-name")
    def first() -> int:
        return 1

    def second() -> int:
        return 2

    with pytest.raises(EverystepError, match=re.escape("unit-tests.taken-name")):
        everystep.workflow(name="unit-tests.taken-name")(second)
    defn = registry.lookup("unit-tests.taken-name")
    assert defn is not None
    assert defn.fn is first


def test_same_function_can_be_registered_again() -> None:
    """Re-registering the same function under its name (a re-import) is accepted."""

    def again() -> int:
        return 1

    everystep.workflow(name="unit-tests.re-registered")(again)
    everystep.workflow(name="unit-tests.re-registered")(again)
    defn = registry.lookup("unit-tests.re-registered")
    assert defn is not None
    assert defn.fn is again


@pytest.mark.parametrize("name", ["", "   "])
def test_blank_explicit_name_is_refused(name: str) -> None:
    """``@workflow(name="")`` is refused with TypeError."""

    def body() -> None:
        return None

    with pytest.raises(TypeError):
        everystep.workflow(name=name)(body)


def test_context_is_none_outside_a_run() -> None:
    """``everystep.context.current()`` is None outside a running workflow."""
    assert context.current() is None


def test_context_is_none_inside_a_step_called_outside_a_run() -> None:
    """A step called directly sees no workflow context either."""

    @everystep.step
    def look() -> Any:
        return context.current()

    assert look() is None


@pytest.mark.parametrize(
    "name", ["EverystepError", "WorkflowCodeError", "StepFailure", "EffectUncertain"]
)
def test_error_classes_subclass_everystep_error(name: str) -> None:
    """The documented error classes exist in ``everystep.errors`` under EverystepError."""
    cls = getattr(errors, name)
    assert isinstance(cls, type)
    assert issubclass(cls, errors.EverystepError)
    assert issubclass(cls, Exception)


def test_terminal_is_an_everystep_error() -> None:
    """``Terminal`` is an EverystepError carrying reason and payload."""
    stop = everystep.Terminal("out of stock", {"sku": "A1"})
    assert isinstance(stop, errors.EverystepError)
    assert stop.reason == "out of stock"
    assert stop.payload == {"sku": "A1"}
    assert everystep.Terminal("r").payload is None


def test_internal_interruption_is_not_catchable_as_exception() -> None:
    """Internal control flow (RunInterrupted) escapes a user's ``except Exception:``."""
    assert not issubclass(errors.RunInterrupted, Exception)
    with pytest.raises(errors.RunInterrupted):
        try:
            raise errors.DrainRequested("drain")
        except Exception:  # pragma: no cover - must not be reached
            pytest.fail("RunInterrupted was swallowed by except Exception")


def test_step_failure_and_effect_uncertain_keep_their_details() -> None:
    """StepFailure keeps ``original_type``; EffectUncertain keeps ``step_id``."""
    failure = errors.StepFailure("x.Y: boom", "x.Y")
    assert failure.original_type == "x.Y"
    assert str(failure) == "x.Y: boom"
    uncertain = errors.EffectUncertain("blocked", "2.0.charge")
    assert uncertain.step_id == "2.0.charge"
