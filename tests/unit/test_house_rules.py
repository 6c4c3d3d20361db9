"""The house rules, kept by the suite: modules and functions of the library and the runner
stay small, and each package's docstring is true to its tree (docs/contributing.md,
"Layout"). Read from the source with ``ast``: no database, nothing imported.

A rule is broken only with its reason written beside the exception, and an exception
that is no longer needed fails the suite until it is removed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_code_map import layout_block

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "everystep", ROOT / "image" / "everystep_runner")
MODULE_LINES = 400
FUNCTION_LINES = 60

# "path" (a module) or "path::qualname" (a function or method) → why it may be longer.
OVER_THE_LIMIT: dict[str, str] = {}

# A package's path → why its docstring may miss a module, or name one that is gone.
UNTRUE_DOCSTRINGS: dict[str, str] = {}


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def library_modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in package.rglob("*.py")
        if "migrations" not in path.relative_to(package).parts
    )


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function and method under ``node``: its qualified name and its length in
    lines, from ``def`` to its last line (decorators left out)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, (child.end_lineno or child.lineno) - child.lineno + 1
            yield from functions(child, f"{prefix}{child.name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from functions(child, f"{prefix}{child.name}.")
        else:
            yield from functions(child, prefix)


def overruns() -> dict[str, int]:
    """Every module and function over its limit, with its length in lines."""
    found: dict[str, int] = {}
    for path in library_modules():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MODULE_LINES:
            found[relative(path)] = len(text.splitlines())
        for qualname, length in functions(ast.parse(text)):
            if length > FUNCTION_LINES:
                found[f"{relative(path)}::{qualname}"] = length
    return found


OVERRUNS = overruns()


def test_no_module_is_over_400_lines() -> None:
    """No module of the library (migrations aside) or of the runner is over 400 lines."""
    over = {key: n for key, n in OVERRUNS.items() if "::" not in key}
    unexcused = {key: n for key, n in over.items() if key not in OVER_THE_LIMIT}
    assert not unexcused, f"modules over {MODULE_LINES} lines (split them): {unexcused}"


def test_no_function_is_over_60_lines() -> None:
    """No function or method of the library or the runner is over 60 lines."""
    over = {key: n for key, n in OVERRUNS.items() if "::" in key}
    unexcused = {key: n for key, n in over.items() if key not in OVER_THE_LIMIT}
    assert not unexcused, f"functions over {FUNCTION_LINES} lines (split them): {unexcused}"


def test_each_size_exception_has_its_reason_and_is_still_needed() -> None:
    """An exception to the size limits says why, and goes once the code is within them."""
    assert all(reason.strip() for reason in OVER_THE_LIMIT.values())
    stale = sorted(set(OVER_THE_LIMIT) - set(OVERRUNS))
    assert not stale, f"within the limits now, remove their exceptions: {stale}"


def test_functions_are_measured_without_decorators_by_qualified_name() -> None:
    """The measure names methods and nested functions by qualname and leaves decorators out."""
    tree = ast.parse(
        "class A:\n"
        "    @property\n"
        "    @staticmethod\n"
        "    def f():\n"
        "        def g():\n"
        "            pass\n"
    )
    assert dict(functions(tree)) == {"A.f": 3, "A.f.<locals>.g": 2}


def packages() -> list[Path]:
    return sorted(
        init.parent
        for package in PACKAGES
        for init in package.rglob("__init__.py")
        if "migrations" not in init.relative_to(package).parts
    )


def members(package: Path) -> set[str]:
    """The modules in ``package``: its ``.py`` files and the packages inside it."""
    files = {path.stem for path in package.glob("*.py") if path.name != "__init__.py"}
    return files | {path.name for path in package.iterdir() if (path / "__init__.py").exists()}


def inside(package: Path) -> set[str]:
    """The package's own name and every module in it, however deep."""
    names = {package.name} | members(package)
    for sub in package.iterdir():
        if (sub / "__init__.py").exists() and sub.name != "migrations":
            names |= inside(sub)
    return names


def docstring(package: Path) -> str:
    tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    return ast.get_docstring(tree) or ""


def named(text: str) -> set[str]:
    """The lower-case names in double backticks (``name``, or ``name/`` for a package)."""
    return {name.rstrip("/") for name in re.findall(r"``([a-z_][a-z0-9_]*/?)``", text)}


def defined_names() -> set[str]:
    """What the code names at module or class level (functions, classes, assignments and
    the strings assigned there, such as a status): words a docstring may put in double
    backticks that are not modules."""
    names: set[str] = set()
    for path in library_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if not isinstance(node, (ast.Module, ast.ClassDef)):
                continue
            for statement in node.body:
                if isinstance(statement, (ast.Assign, ast.AnnAssign)):
                    targets = getattr(statement, "targets", [getattr(statement, "target", None)])
                    names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                    value = statement.value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        names.add(value.value)
    return names


DEFINED = defined_names()
CHECKED = [package for package in packages() if relative(package) not in UNTRUE_DOCSTRINGS]


def missing_from(package: Path) -> list[str]:
    """The modules of ``package`` its docstring does not name, or, where the docstring
    defers to the map in docs/contributing.md, the map does not."""
    text = docstring(package)
    if "docs/contributing.md" not in text:
        return sorted(members(package) - named(text))
    on_map = set(re.findall(r"\b(\w+)(?:\.py\b|/)", layout_block()))
    return sorted(members(package) - on_map)


def gone_from(package: Path) -> list[str]:
    """The names in ``package``'s docstring that are neither a module in it nor a name
    the code defines: modules that are gone."""
    return sorted(named(docstring(package)) - inside(package) - DEFINED)


@pytest.mark.parametrize("package", CHECKED, ids=relative)
def test_package_docstring_names_every_module(package: Path) -> None:
    """A package's docstring (or the map it defers to) names every module it contains."""
    missing = missing_from(package)
    assert not missing, f"{relative(package)}/__init__.py does not name: {missing}"


@pytest.mark.parametrize("package", CHECKED, ids=relative)
def test_package_docstring_names_no_module_that_is_gone(package: Path) -> None:
    """A package's docstring names no module that does not exist."""
    gone = gone_from(package)
    assert not gone, f"{relative(package)}/__init__.py names what does not exist: {gone}"


def test_each_docstring_exception_has_its_reason_and_is_still_needed() -> None:
    """A package left out of the docstring checks says why, and comes back once its
    docstring is true again."""
    assert all(reason.strip() for reason in UNTRUE_DOCSTRINGS.values())
    untrue = {
        relative(package) for package in packages() if missing_from(package) or gone_from(package)
    }
    stale = sorted(set(UNTRUE_DOCSTRINGS) - untrue)
    assert not stale, f"docstrings true now, remove their exceptions: {stale}"
