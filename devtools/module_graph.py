"""The import graph of the ``dynamo_dist`` package, read from its sources
(no import): which of its modules each module imports, anywhere in its body
(``TYPE_CHECKING`` blocks excepted). docs/design.md's layout block draws it;
``tests/unit/test_structure.py`` checks it has no cycle and that the layout block
names every module.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "dynamo_dist"
PACKAGE = "dynamo_dist"


def modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Module name -> its file, for every module of the package."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(module: str, path: pathlib.Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(found: dict[str, pathlib.Path] | None = None,
                 trees: dict[str, ast.Module] | None = None) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    found = found if found is not None else modules()
    trees = trees if trees is not None else {m: ast.parse(p.read_text(), str(p)) for m, p in found.items()}
    graph: dict[str, set[str]] = {m: set() for m in found}
    for module, tree in trees.items():
        # `if TYPE_CHECKING:` imports never run: they make no runtime edge.
        typing_only = {id(n) for block in ast.walk(tree)
                       if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, found[module], node)
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in found else target for a in node.names]
            for t in targets:
                while t and t not in found:  # `import a.b.c` of a name inside a module
                    t = t.rpartition(".")[0]
                if t.startswith(PACKAGE) and t != module:
                    graph[module].add(t)
    return graph


def part(module: str) -> str:
    """The top-level part of the package a module belongs to."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Part -> the other parts its modules import."""
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        parts.setdefault(part(module), set()).update(part(t) for t in targets if part(t) != part(module))
    return parts


def text(graph: dict[str, set[str]] | None = None) -> str:
    """The graph by part, then by module, one line each."""
    graph = graph if graph is not None else import_graph()
    lines = ["dynamo_dist, part by part (a part imports the parts after its arrow):", ""]
    for name, targets in sorted(part_graph(graph).items()):
        lines.append(f"  {name:<12} -> {', '.join(sorted(targets)) or '(nothing of the package)'}")
    lines += ["", "module by module:", ""]
    for module, targets in sorted(graph.items()):
        short = sorted(t.removeprefix(f"{PACKAGE}.") for t in targets)
        lines.append(f"  {module.removeprefix(f'{PACKAGE}.')} -> {', '.join(short) or '-'}")
    return "\n".join(lines)
