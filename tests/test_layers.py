"""The import graph of the product: no circles between files, no import pointing up the layers of
docs/design.md ("Layers"). Every import counts, a function-local one too (only `if TYPE_CHECKING:` blocks
are skipped: they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: each package's floor; a module may import only from a lower floor or its own package
FLOORS = {
    "primuspp": 0,  # the top-level helpers (errors, inputs, outputs, suggest, process settings)
    "primuspp.schedule": 1,
    "primuspp.algorithms": 2,
    "primuspp.trace": 3,
    "primuspp.sim": 4,
    "primuspp.config": 5,
    "primuspp.runtime": 5,
    "primuspp.viz": 6,
    "primuspp.models": 6,
    "primuspp.backends": 7,
    "primuspp.commands": 8,
}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "commands":
        parts = ["primuspp", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    files = sorted([*ROOT.joinpath("primuspp").rglob("*.py"), *ROOT.joinpath("commands").rglob("*.py")])
    modules = {_module(f): f for f in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        package = _package(module, path.name == "__init__.py")
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for name in names:
                # the longest module prefix of the imported name (a name may be a module's attribute)
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):
                    graph[module].add(name)
    return graph


def _floor(module: str) -> int:
    best = ""
    for package in FLOORS:
        if (module == package or module.startswith(package + ".")) and len(package) > len(best):
            best = package
    return FLOORS[best]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _cycles(import_graph()) == []


def test_no_import_points_up_the_layers() -> None:
    up = [
        f"{a} -> {b}"
        for a, targets in import_graph().items()
        for b in sorted(targets)
        if _floor(b) > _floor(a) and not a.endswith("__main__")
    ]
    assert up == []


def test_the_graph_sees_imports() -> None:
    """The checks above can fail: the graph holds the known arrows of the product."""
    graph = import_graph()
    assert "primuspp.schedule.table" in graph["primuspp.algorithms.registry"] or any(
        t.startswith("primuspp.schedule") for t in graph["primuspp.algorithms.registry"]
    )
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
