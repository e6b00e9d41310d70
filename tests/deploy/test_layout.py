"""The house's rules, checked on the code as it is: services/mcp_lab/ has at most 10 top-level
modules and none over 500 lines, nothing in the runners' wing imports the command
line, the server wing imports no runner, and neither services/mcp_lab/ nor scripts/ has
an import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.lab import ROOT


def imports(root: Path, package: str) -> dict[str, set[str]]:
    """Each module under ``root`` (named from ``package``) and the modules it imports
    (of the same tree), whether at its top or inside a function."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        name = ".".join(p for p in parts if p)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            found: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                found = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            for target in found:
                if target in modules and target != name:
                    graph[name].add(target)
                    break
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_services_top_level_has_at_most_ten_modules() -> None:
    top = [p.stem for p in (ROOT / "services" / "mcp_lab").glob("*.py")]
    top = [name for name in top if name not in ("__init__", "__main__")]
    assert len(top) <= 10, sorted(top)


# A module a newcomer reads in one sitting; one that grows past this is split by
# concern (cli/main.py was split by command).
MAX_MODULE_LINES = 500


def test_no_module_of_the_lab_is_over_500_lines() -> None:
    package = ROOT / "services" / "mcp_lab"
    lengths = {
        str(path.relative_to(package)): len(path.read_text().splitlines())
        for path in sorted(package.rglob("*.py"))
    }
    long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"
    assert len(lengths) > 100  # the walk found the package


def test_the_runners_never_import_the_command_line_nor_the_server_a_runner() -> None:
    graph = imports(ROOT / "services" / "mcp_lab", "mcp_lab")
    runners = {m: deps for m, deps in graph.items() if m.startswith("mcp_lab.runners")}
    assert not [(m, d) for m, deps in runners.items() for d in deps if d.startswith("mcp_lab.cli")]
    server = {m: deps for m, deps in graph.items() if m.startswith("mcp_lab.server")}
    assert not [(m, d) for m, deps in server.items() for d in deps
                if d.startswith(("mcp_lab.runners", "mcp_lab.cli"))]  # fmt: skip


def test_no_import_cycle_in_services_or_scripts() -> None:
    services = imports(ROOT / "services" / "mcp_lab", "mcp_lab")
    scripts = imports(ROOT / "scripts", "")
    assert cycles(services) == [] and cycles(scripts) == []
    # the graphs are read, not empty: a cycle would show
    assert "mcp_lab.contract" in services["mcp_lab.evidence.recorder"]
    assert "bench.procs" in scripts["bench.storm"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def top_level_names(folder: Path) -> dict[str, list[str]]:
    """Each name a module under ``folder`` defines at its top (a function, a class, an
    assignment's target), and the modules that define it."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        if "libraries" in path.parts:  # the library clients' programs, not the runner's code
            continue
        for node in ast.parse(path.read_text()).body:
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    parts = target.elts if isinstance(target, ast.Tuple) else [target]
                    names += [p.id for p in parts if isinstance(p, ast.Name)]
            for name in names:
                found.setdefault(name, []).append(path.name)
    return found


def test_clients_and_bridges_are_two_kinds_of_one_runner() -> None:
    # What both kinds do alike lives once, in the shared kit: no name is defined in the
    # clients' code and the bridges' code both.
    runners = ROOT / "services" / "mcp_lab" / "runners"
    clients, bridges = (top_level_names(runners / kind) for kind in ("clients", "bridges"))
    assert len(clients) > 100 and len(bridges) > 50  # the walk found them
    both = {name: (clients[name], bridges[name]) for name in sorted(set(clients) & set(bridges))}
    assert not both, f"defined in both the clients' and the bridges' code: {both}"
    # and the shared kit (the modules directly in runners/) imports neither kind.
    graph = imports(ROOT / "services" / "mcp_lab", "mcp_lab")
    kit = {m: deps for m, deps in graph.items() if m.count(".") == 2 and "runners." in m}
    kinds = ("mcp_lab.runners.clients", "mcp_lab.runners.bridges")
    assert "mcp_lab.runners.history_kinds" in kit and "mcp_lab.runners.matrix" in kit
    assert not [(m, d) for m, deps in kit.items() for d in deps if d.startswith(kinds)]
