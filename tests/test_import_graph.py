"""The five packages' import graph (issue 47): no module imports itself back through others at
import time, and no package imports one above it (skyrl_gym <- skyrl_agent <- trainers,
harbor_adapter <- integrations), read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Each package's floor: a module may import its own floor and the floors below.
FLOORS = {"skyrl_gym": 1, "skyrl_agent": 2, "trainers": 3, "harbor_adapter": 3, "integrations": 4}


def _modules() -> dict[str, Path]:
    out = {}
    for package in FLOORS:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "tasks" in parts and package == "harbor_adapter":  # task files run in containers
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, name: str, modules: dict[str, Path], *, top_level: bool) -> set[str]:
    """The project modules ``name`` imports: at import time only (module level, outside
    ``if TYPE_CHECKING``) with ``top_level``, else anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def target(mod: str) -> str | None:
        while mod and mod not in modules:
            mod = mod.rpartition(".")[0]
        return mod or None

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, ast.Import):
                found.update(t for a in node.names if (t := target(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    t = target(f"{base}.{alias.name}") if base else None
                    if t is not None and t != name:
                        found.add(t)
            if top_level:
                if isinstance(node, (ast.If, ast.Try, ast.With)):
                    visit(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", []))
                    for handler in getattr(node, "handlers", []):
                        visit(handler.body)
            else:
                visit([n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)])

    visit(tree.body)
    found.discard(name)
    return found


def test_no_module_imports_itself_back_at_import_time():
    modules = _modules()
    graph = {name: _imports(path, name, modules, top_level=True) for name, path in modules.items()}
    # a parent package's __init__ runs before its submodules: an edge from a submodule up to its
    # own package's __init__ is how Python imports anyway, not a cycle of the code
    for name, edges in graph.items():
        edges -= {p for p in edges if name.startswith(p + ".")}
    cycles, state = [], dict.fromkeys(graph, 0)

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state[nxt] == 1:
                cycles.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif state[nxt] == 0:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if state[start] == 0:
            walk(start, [start])
    assert len(modules) > 150 and sum(map(len, graph.values())) > 300  # the graph was read
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_package_imports_one_above_it():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        floor = FLOORS[name.split(".")[0]]
        for dep in _imports(path, name, modules, top_level=False):
            if FLOORS[dep.split(".")[0]] > floor:
                upward.append(f"{name} -> {dep}")
    assert upward == [], "imports of a package above:\n" + "\n".join(sorted(upward))


def test_no_package_reaches_into_another_package_s_private_modules():
    """The trainer, the integrations and the Harbor adapter use the runtime's and the env SDK's
    published modules only (a name part starting with ``_`` is private to its package)."""
    modules = _modules()
    private = []
    for name, path in modules.items():
        for dep in _imports(path, name, modules, top_level=False):
            other = dep.split(".")[0] != name.split(".")[0]
            if other and any(part.startswith("_") and part != "__init__" for part in dep.split(".")):
                private.append(f"{name} -> {dep}")
    assert private == [], "imports of another package's private modules:\n" + "\n".join(sorted(private))
