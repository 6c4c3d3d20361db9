"""The layers of the library point one way, and no module imports itself in a circle.

Read from the source with ``ast``, so the test needs no database and sees every import,
including those inside functions. Imports under ``if TYPE_CHECKING:`` are left out: they
exist for the type checker only and create no dependency at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "everystep"

# Lowest first. A module may import from its own layer and the layers below it only.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        (
            "everystep.values",
            "everystep.errors",
            "everystep.options",
            "everystep.cpus",
            "everystep.signals",
            "everystep.tallies",
            "everystep.tracing",
            "everystep.safe_text",
            "everystep.serde",
            "everystep.shapes",
            "everystep.stored_errors",
            "everystep.stored_types",
            "everystep.failure_detail",
            "everystep.wait_words",
            "everystep.times",
            "everystep.registry",
            "everystep.task_framework",
            "everystep.conf",
            "everystep.checks",
            "everystep.code_version",
            "everystep.sync_callers",
        ),
    ),
    ("models", ("everystep.models", "everystep.migrations")),
    ("store", ("everystep.store",)),
    # The engine's rooms (everystep/engine/__init__.py): the core of a pass, the
    # operations a body calls, the async machinery, then the entries on top.
    ("engine: the core of a pass", ("everystep.engine.core",)),
    ("engine: the operations", ("everystep.engine.operations",)),
    ("engine: async bodies", ("everystep.engine.asynchronous",)),
    (
        "engine (execute, steps) and observability",
        (
            "everystep.engine",
            "everystep.context",
            "everystep.metrics",
            "everystep.logs",
            "everystep.sentry",
        ),
    ),
    ("worker", ("everystep.worker",)),
    (
        "above the engine, beside the worker",
        (
            "everystep.waiting",
            "everystep.replays",
            "everystep.builtins",
            "everystep.task_runs",
            "everystep.task_signals",
        ),
    ),
    (
        "edges",
        (
            "everystep.api",
            "everystep.decorators",
            "everystep.scheduling",
            "everystep.cancelling",
            "everystep.tasks",
            "everystep.testing",
            "everystep.management",
            "everystep.ui",
            "everystep.urls",
            "everystep.admin",
            "everystep.apps",
            "everystep",
        ),
    ),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    module_name(path): path
    for path in sorted(PACKAGE.rglob("*.py"))
    if "migrations" not in path.parts
}


def layer_of(module: str) -> int:
    """The index of the most specific layer prefix matching ``module``."""
    best, best_length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> set[str]:
    """The everystep modules ``module`` imports at run time."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from everystep.store import claims` depends on the submodule.
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name == "everystep" or name.startswith("everystep.")}


GRAPH = {module: {dep for dep in imports_of(module) if dep in MODULES} for module in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    """No module imports from a layer above its own (api → engine → store → models)."""
    upward = [
        f"{dep} ({LAYERS[layer_of(dep)][0]})"
        for dep in sorted(GRAPH[module])
        if layer_of(dep) > layer_of(module)
    ]
    assert not upward, f"{module} ({LAYERS[layer_of(module)][0]}) imports upward: {upward}"


def test_no_import_cycles():
    """No module reaches itself through its imports (a package importing its own
    submodules to re-export them is not a cycle)."""

    def edges(module: str) -> set[str]:
        return {dep for dep in GRAPH[module] if not dep.startswith(module + ".")}

    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(edges(module)):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                walk(dep, [*path, dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            walk(module, [module])
    assert not cycles, f"import cycles: {cycles}"


def test_the_worker_package_does_not_import_the_worker_class_back():
    """Collaborators of Worker (probes, metrics, drain, heartbeat) read WorkerState, never
    the Worker class itself."""
    back = sorted(
        module
        for module, deps in GRAPH.items()
        if module != "everystep.worker" and "everystep.worker.loop" in deps
    )
    assert back == [], f"these import worker.loop: {back}"
