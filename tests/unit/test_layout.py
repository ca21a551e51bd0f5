"""The hogwild package has no import cycles between its modules (module-level imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "src" / "hogwild"

# Rules of the graph:
# - Only statements that run when the module is imported count: those at module level and
#   inside module-level `if` / `try` / `with` blocks and class bodies. Imports inside functions
#   run later (on call), so they are not part of the import-time graph.
# - `if TYPE_CHECKING:` bodies never execute, so they do not count (their `else:` does).
# - `import a.b.c` and `from a.b import c` import every package on the way (a, a.b) because
#   Python runs each package's __init__ first; `from pkg import name` imports pkg.name when
#   that is a module, otherwise it reads a name defined by pkg's __init__.
# - A module's own enclosing packages are left out: Python has already started them before
#   the module's body runs, so reaching them adds no new ordering. An explicit
#   `from pkg import name` of a non-module name from an enclosing package still counts,
#   because it needs that __init__ to have got far enough to define the name.


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not is_type_checking(node.test):
                found += import_time_statements(node.body)
            found += import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                found += import_time_statements(block)
            for handler in node.handlers:
                found += import_time_statements(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += import_time_statements(node.body)
    return found


def with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def every_statement(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere, inside functions too (not under TYPE_CHECKING)."""
    found = import_time_statements(body)
    for node in body:
        for inner in ast.walk(node):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [n for n in ast.walk(inner) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path], *,
               deferred: bool = False) -> set[str]:
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    reached: set[str] = set()
    explicit: set[str] = set()
    pick = every_statement if deferred else import_time_statements
    for node in pick(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                reached.update(with_packages(alias.name))
            continue
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        reached.update(with_packages(base))
        for alias in node.names:
            if f"{base}.{alias.name}" in modules:
                reached.add(f"{base}.{alias.name}")
            else:
                explicit.add(base)
    ancestors = set(with_packages(name)) if is_package else set(with_packages(package))
    edges = {m for m in reached if m in modules and m not in ancestors}
    edges |= {m for m in explicit if m in modules and m != name}
    return edges


def import_graph(*, deferred: bool = False) -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules, deferred=deferred)
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                succ = pending.pop()
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, sorted(graph[succ])))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & inside)]
    return "  cycle: " + ", ".join(component) + "\n    " + "\n    ".join(edges)


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "hogwild.cli" in graph and "hogwild.data.csr" in graph
    # An absolute import, a relative one and a package __init__ re-export are all resolved.
    assert "hogwild.protocol._stubs" in graph["hogwild.protocol"]
    assert graph["hogwild.cli"], "hogwild.cli imports other hogwild modules at module level"


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from hogwild.data import csr\n", {"hogwild.data.csr"}),
        ("from hogwild.data import CSRData\n", {"hogwild.data"}),
        ("from . import csr\n", {"hogwild.data.csr"}),
        ("from .csr import CSRData\n", {"hogwild.data.csr"}),
        ("if TYPE_CHECKING:\n    from hogwild.config import Settings\n", set()),
        ("def f() -> None:\n    import hogwild.config\n", set()),
        ("import hogwild.model.schedule\n", {"hogwild.model", "hogwild.model.schedule"}),
    ],
)
def test_import_rules(tmp_path: Path, source: str, expected: set[str]) -> None:
    modules = all_modules()
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert imports_of("hogwild.data.probe", path, modules) == expected


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "hogwild modules import each other in a cycle:\n" + "\n".join(
        describe(component, graph) for component in found
    )


# Imports inside a function run on call, not on import: no import order breaks on a cycle
# they close, but it would tie a lower module to a higher one. None may appear: the processes
# `hogwild run` starts (runtime.prespawn, runtime.forked) are handed the command line's runner
# by hogwild.cli instead of importing it.
def test_no_cycles_through_deferred_imports() -> None:
    graph = import_graph(deferred=True)
    found = cycles(graph)
    assert not found, "hogwild modules import each other in a cycle (through imports inside "\
        "functions):\n" + "\n".join(describe(component, graph) for component in found)


def test_deferred_imports_are_seen() -> None:
    graph = import_graph(deferred=True)
    # imported inside a command's function
    assert "hogwild.inprocess.local" in graph["hogwild.commands.roles"]


def test_no_cycle_through_a_package_init() -> None:
    """`from pkg import sub` runs pkg's __init__ first, even inside pkg: an __init__ that
    re-exports its submodules' names, imported that way by one of them, closes a cycle in
    which that submodule sees the package half initialised. Counted here: the graph above
    plus, for every `from pkg import ...` at import time, the package itself."""
    modules = all_modules()
    graph = import_graph()
    for name, path in modules.items():
        for node in import_time_statements(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in modules \
                    and node.module != name:
                graph[name].add(node.module)
    found = cycles(graph)
    assert not found, f"cycles through a package __init__: {found}"
