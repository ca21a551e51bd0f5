"""The hogwild package has no import cycles between its modules, and its imports point one way."""

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
    assert "hogwild.cluster.wire._stubs" in graph["hogwild.cluster.wire"]
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
# `hogwild run` starts (cluster.localrun.prespawn, .forked) are handed the command line's runner
# by hogwild.cli instead of importing it.
def test_no_cycles_through_deferred_imports() -> None:
    graph = import_graph(deferred=True)
    found = cycles(graph)
    assert not found, "hogwild modules import each other in a cycle (through imports inside "\
        "functions):\n" + "\n".join(describe(component, graph) for component in found)


# Imports of the project's own modules inside functions: each says why it waits (keeping
# `hogwild --help` and `--version` light, a heavy library loaded only where it is used, a
# process's warm-up), on its line or in the three lines above; and no more of them.
DEFERRED_BUDGET = 40


def deferred_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, whether a comment says why) of each own-module import inside a function."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for item in ast.walk(ast.parse(text)):
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(item):
            module = (node.module if isinstance(node, ast.ImportFrom) else
                      node.names[0].name if isinstance(node, ast.Import) else None)
            if module and module.split(".")[0] == "hogwild":
                at = node.lineno - 1
                found.append((node.lineno, any("#" in ln for ln in lines[max(0, at - 3):at + 1])))
    return found


def test_deferred_imports_say_why_and_keep_to_a_budget() -> None:
    every = {(name, line): why for name, path in all_modules().items()
             for line, why in deferred_imports(path)}
    silent = sorted(key for key, why in every.items() if not why)
    assert not silent, f"imports inside functions with no comment saying why: {silent}"
    assert len(every) <= DEFERRED_BUDGET, \
        f"{len(every)} imports inside functions, over the budget of {DEFERRED_BUDGET}"


def test_the_deferred_import_check_sees_one(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f():\n    x = 1\n\n\n    import hogwild.data\n"
                    "def g():\n    # (light)\n    from hogwild import errors\n")
    assert deferred_imports(path) == [(5, False), (8, True)]


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


# ---------------------------------------------------------------------------------------------
# Direction. Each top-level module or folder of the package (a "unit"; inside cluster/, each
# of its folders is a unit of its own) sits in a layer and may import only the units listed
# for it here: the ground (errors, settings, config, base/: atomic files, the JIT switch,
# process start-up, host names, numbers for people) <- data <- model <- engine <- outputs <-
# runtime (warm-up, signals, start-up lines) <- in-process training | the cluster (its wire
# code <- its transport <- the coordinator | the worker, which never import each other <- the
# local launcher of `hogwild run`) <- the estimators, experiments <- commands/ <- cli. Imports
# inside functions count (they tie a lower module to a higher one all the same);
# `TYPE_CHECKING`-only ones do not.
GROUND = frozenset({"hogwild", "errors", "settings", "config", "base"})
_BELOW_ROLES = GROUND | {"data", "model", "engine", "outputs", "runtime"}
_CLUSTER = frozenset({"cluster", "cluster.wire", "cluster.transport", "cluster.coordinator",
                      "cluster.worker", "cluster.localrun"})
ALLOWED_IMPORTS: dict[str, frozenset[str]] = {
    **{unit: GROUND for unit in GROUND},
    "data": GROUND,
    "model": GROUND | {"data"},
    "engine": GROUND | {"data", "model"},
    "outputs": GROUND | {"data", "model", "engine"},
    "runtime": GROUND | {"data", "model", "engine", "outputs"},
    "inprocess": _BELOW_ROLES,
    "cluster": _BELOW_ROLES,
    "cluster.wire": GROUND | {"data", "model", "engine"},
    "cluster.transport": GROUND | {"data", "model", "engine", "cluster.wire"},
    "cluster.coordinator": _BELOW_ROLES | {"cluster.wire", "cluster.transport"},
    "cluster.worker": _BELOW_ROLES | {"cluster.wire", "cluster.transport"},
    "cluster.localrun": _BELOW_ROLES | {"cluster.wire", "cluster.transport"},
    "estimators": _BELOW_ROLES | {"cluster", "cluster.localrun"},
    "experiment": _BELOW_ROLES | {"inprocess", "cluster", "cluster.localrun"},
    "commands": _BELOW_ROLES | _CLUSTER | {"inprocess", "estimators", "experiment"},
}
ALLOWED_IMPORTS["cli"] = ALLOWED_IMPORTS["commands"] | {"commands"}
# The entry point of a process of `hogwild run` started before its command line: handed cli's
# runner, as the `hogwild` command is.
ALLOWED_IMPORTS["prespawned"] = ALLOWED_IMPORTS["cli"] | {"cli"}

# Wrong-way imports tolerated for now, each as (importing module, imported module): the list
# only shrinks. A new wrong-way import fails the test below; removing one fails it too, until
# its entry is deleted here.
KNOWN_WRONG_WAY: set[tuple[str, str]] = set()

# Cycles between units (through any import, inside functions too) tolerated for now.
KNOWN_UNIT_CYCLES: list[list[str]] = []


def unit_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "cluster":
        return f"cluster.{parts[2]}"
    return parts[1] if len(parts) > 1 else parts[0]


def wrong_way_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs that cross into a unit the importer's layer may not import.
    A package reached only on the way to one of its modules is not listed on its own."""
    found: list[tuple[str, str]] = []
    for name, targets in graph.items():
        allowed = ALLOWED_IMPORTS[unit_of(name)]
        for target in targets:
            unit = unit_of(target)
            if unit == unit_of(name) or unit in allowed:
                continue
            if any(other.startswith(target + ".") for other in targets):
                continue
            found.append((name, target))
    return sorted(found)


def unit_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    units: dict[str, set[str]] = {}
    for name, targets in graph.items():
        units.setdefault(unit_of(name), set()).update(
            unit_of(t) for t in targets if unit_of(t) != unit_of(name))
    for targets in list(units.values()):
        for unit in targets:
            units.setdefault(unit, set())
    return cycles(units)


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(name) for name in all_modules()}
    assert units <= set(ALLOWED_IMPORTS), \
        f"units missing from ALLOWED_IMPORTS: {sorted(units - set(ALLOWED_IMPORTS))}"


def test_the_direction_check_finds_an_upward_import() -> None:
    graph = {"hogwild.data.csr": {"hogwild.engine", "hogwild.engine.fit", "hogwild.errors"},
             "hogwild.engine.fit": {"hogwild.data.csr"}}
    assert wrong_way_imports(graph) == [("hogwild.data.csr", "hogwild.engine.fit")]
    assert unit_cycles(graph) == [["data", "engine"]]


def test_imports_point_one_way() -> None:
    found = set(wrong_way_imports(import_graph(deferred=True)))
    new = sorted(found - KNOWN_WRONG_WAY)
    gone = sorted(KNOWN_WRONG_WAY - found)
    assert not new, "imports against the layers (see ALLOWED_IMPORTS):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in new)
    assert not gone, "no longer imported, delete from KNOWN_WRONG_WAY:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in gone)


def test_folder_cycles() -> None:
    found = unit_cycles(import_graph(deferred=True))
    assert found == KNOWN_UNIT_CYCLES, f"cycles between units: {found}"


# The worker's modules reach the node, and one another's objects, through public names only:
# a private name (`node._x`, `self.relay._x`) stays its own module's, so it can change without
# touching its collaborators.
def private_reaches(source: str) -> list[str]:
    """`x._y` in source for any x but `self` and `cls` (dunders aside): line and name of each."""
    found: list[tuple[int, str]] = []
    for item in ast.walk(ast.parse(source)):
        if not (isinstance(item, ast.Attribute) and item.attr.startswith("_")
                and not item.attr.startswith("__")):
            continue
        owner = item.value
        if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            found.append((item.lineno, item.attr))
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_the_private_reach_check_finds_one() -> None:
    source = ("def f(node, self):\n    node._cond.wait()\n    self.node._drop(1)\n"
              "    node.x.__len__()\n    self._own = 1\n    relay.tree._links.clear()\n")
    assert private_reaches(source) == ["2: _cond", "3: _drop", "6: _links"]


def test_worker_modules_use_only_each_others_public_names() -> None:
    modules = sorted((PACKAGE_ROOT / "cluster" / "worker").glob("*.py"))
    assert len(modules) > 10
    reaches = {p.name: found for p in modules
               if (found := private_reaches(p.read_text(encoding="utf-8")))}
    assert reaches == {}


# Each worker role sees the node through a Protocol declared beside it (RoundsHost, ...), and
# is handed what it shares with the others (shared.py's locks, events, counters and stop
# state, the tree relay) rather than reaching it through the node: none names more than this
# many members. The RPC service's view of the node (servicer.py's Served: one member per RPC
# it passes on) has a budget of its own.
HOST_MEMBERS_AT_MOST = 9
SERVED_MEMBERS_AT_MOST = 14


def protocol_members(source: str) -> dict[str, int]:
    """Each Protocol class in source: how many attributes and methods it declares."""
    return {item.name: sum(isinstance(m, (ast.AnnAssign, ast.FunctionDef)) for m in item.body)
            for item in ast.parse(source).body
            if isinstance(item, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id == "Protocol" for b in item.bases)}


def test_the_protocol_count_sees_attributes_and_methods() -> None:
    source = ("class H(Protocol):\n    \"\"\"Doc.\"\"\"\n\n    a: int\n    b: str\n\n"
              "    def f(self) -> None: ...\n\n\nclass N:\n    c: int\n")
    assert protocol_members(source) == {"H": 3}


def test_worker_host_protocols_keep_to_a_budget() -> None:
    found = {f"{p.name}: {name}": count
             for p in sorted((PACKAGE_ROOT / "cluster" / "worker").glob("*.py"))
             for name, count in protocol_members(p.read_text(encoding="utf-8")).items()}
    assert "roundloop.py: RoundsHost" in found and "servicer.py: Served" in found
    over = {name: count for name, count in found.items()
            if count > (SERVED_MEMBERS_AT_MOST if name == "servicer.py: Served"
                        else HOST_MEMBERS_AT_MOST)}
    assert over == {}, f"over the budget of {HOST_MEMBERS_AT_MOST} members: {over}"


NODE_MODULE = "hogwild.cluster.worker.node"
NODE_METHODS_AT_MOST = 30


def imported_modules(importer: str, source: str) -> set[str]:
    """Every module an `import` or `from ... import` in source may name, at any level (in
    functions and under TYPE_CHECKING too): `from pkg import name` counts as pkg and pkg.name."""
    package = importer.rsplit(".", 1)[0]
    found: set[str] = set()
    for item in ast.walk(ast.parse(source)):
        if isinstance(item, ast.Import):
            found |= {alias.name for alias in item.names}
        elif isinstance(item, ast.ImportFrom):
            base = item.module or ""
            if item.level:
                anchor = package.split(".")[: len(package.split(".")) - item.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in item.names}
    return found


def test_the_node_import_check_finds_each_form() -> None:
    importer = "hogwild.cluster.worker.roundloop"
    for source in (("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from hogwild.cluster.worker.node import WorkerNode\n"),
                   "import hogwild.cluster.worker.node\n",
                   "from hogwild.cluster.worker import node\n",
                   "from .node import WorkerNode\n",
                   "def f():\n    from . import node\n"):
        assert NODE_MODULE in imported_modules(importer, source), source
    assert NODE_MODULE not in imported_modules(
        importer, "from hogwild.cluster.worker.inbox import Inbox\nfrom . import plan\n")


def test_worker_helpers_do_not_import_the_node() -> None:
    """Each role module sees of the node only what a protocol beside it names (the node
    satisfies it), so none imports node.py. The package's __init__ makes the nodes."""
    modules = {name: path for name, path in all_modules().items()
               if name.startswith("hogwild.cluster.worker.")
               and name != NODE_MODULE and path.name != "__init__.py"}
    assert len(modules) > 10
    importers = sorted(name for name, path in modules.items()
                       if NODE_MODULE in imported_modules(name, path.read_text(encoding="utf-8")))
    assert importers == []


def test_the_worker_node_keeps_to_its_method_budget() -> None:
    source = (PACKAGE_ROOT / "cluster" / "worker" / "node.py").read_text(encoding="utf-8")
    node, = (item for item in ast.parse(source).body
             if isinstance(item, ast.ClassDef) and item.name == "WorkerNode")
    methods = [item.name for item in node.body
               if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(methods) <= NODE_METHODS_AT_MOST, methods


# Private names imported from another module of the package (a private module of one's own
# package, such as data/formats/_textparse.py, is that package's to share). Those left are listed so
# that a new one fails; each leaves the table when it is made public.
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def private_imports(importer: str, source: str, modules: set[str]) -> set[tuple[str, str]]:
    """(importer, module.name) for each `from hogwild... import _name` of a private name
    that is not a module of the importer's own package."""
    found = set()
    for item in ast.walk(ast.parse(source)):
        if not (isinstance(item, ast.ImportFrom) and item.module
                and item.module.split(".")[0] == "hogwild"):
            continue
        for alias in item.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__"):
                continue
            full = f"{item.module}.{name}"
            if full in modules and (importer + ".").startswith(item.module + "."):
                continue
            found.add((importer, full))
    return found


def test_the_private_import_check() -> None:
    modules = {"hogwild.data", "hogwild.data.formats._textparse", "hogwild.data.csr"}
    source = ("from hogwild.data.formats import _textparse\n"
              "from hogwild.data.csr import CSRData, _check\n")
    assert private_imports("hogwild.data.formats.rcv1", source, modules) == {
        ("hogwild.data.formats.rcv1", "hogwild.data.csr._check")}
    assert private_imports("hogwild.model.x", source, modules) == {
        ("hogwild.model.x", "hogwild.data.formats._textparse"), ("hogwild.model.x", "hogwild.data.csr._check")}


def test_no_new_private_imports_across_modules() -> None:
    modules = all_modules()
    found = set()
    for name, path in modules.items():
        found |= private_imports(name, path.read_text(encoding="utf-8"), set(modules))
    assert found - KNOWN_PRIVATE_IMPORTS == set()
    assert KNOWN_PRIVATE_IMPORTS - found == set(), "fixed: drop them from the table"


# Tiers: a unit test runs in the test's own process. Starting a process, a server or the plot
# helper makes it a test of another tier (tests/process, tests/service, tests/cluster).
OTHER_TIERS = ("import subprocess", "subprocess.", "os.fork(", "grpc.server(", "create_server(",
               "create_worker(", "BackgroundPlot(", "Popen(", "serve_metrics(")


def test_unit_tests_start_no_process_nor_server() -> None:
    found = {f"{path.name}: {marker}"
             for path in sorted(Path(__file__).resolve().parent.glob("*.py"))
             if path.name != Path(__file__).name
             for marker in OTHER_TIERS if marker in path.read_text(encoding="utf-8")}
    assert not found, f"tests of another tier under tests/unit: {sorted(found)}"
