"""The import graph of relaykit: no cycles between its modules, and no optional extra loaded.

The graph is read from the source with ``ast``: every ``import`` / ``from ... import`` of a
relaykit module, at module level and inside functions (a function-level import hides a cycle,
it does not remove it), but not under ``if TYPE_CHECKING:`` (never run). A name imported from a
package (``from relaykit import codec``) is an edge to that submodule when it is one, else to
the package. Importing ``relaykit.x`` also runs ``relaykit/__init__``; that implicit edge is not
counted, or every module would be in a cycle with the package root.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import relaykit

SOURCE = Path(relaykit.__file__).parent

#: Import edges (importer, imported) still allowed to close a cycle, each with the reason. The
#: test drops them from the graph before looking for cycles; entries that no longer close a
#: cycle (or no longer exist) are printed, so the list can shrink as the cycles are removed.
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}

#: Edges that must never exist, whatever the allow-list says.
FORBIDDEN_EDGES: dict[tuple[str, str], str] = {
    (
        "relaykit.codec",
        "relaykit.messages",
    ): "the codec sits below the messages: MessageStream registers a codec adapter instead",
}

#: Packages of the optional extras (and griffe, imported lazily by @tool): ``import relaykit``
#: must not load them, so the core stays usable and fast to import without them.
OPTIONAL_PACKAGES = (
    "sqlalchemy",
    "alembic",
    "griffe",
    "openai",
    "anthropic",
    "google.genai",
    "mcp",
    "fastapi",
)


@dataclass(frozen=True, slots=True)
class Edge:
    """One import statement of a relaykit module by another."""

    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        path = module_path(self.importer).relative_to(SOURCE.parent)
        return f"{self.importer} -> {self.imported} ({path}:{self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str) -> Path:
    base = SOURCE.parent.joinpath(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` (their else runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, modules: frozenset[str]) -> list[Edge]:
    """The relaykit modules module ``name`` imports at run time, one edge per statement."""
    path = module_path(name)
    is_package = path.name == "__init__.py"
    edges: list[Edge] = []
    for node in run_time_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package holding this module
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in modules else base)
        for target in targets:
            # "import relaykit.a.b" names the deepest module that exists.
            while target and target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                edges.append(Edge(name, target, getattr(node, "lineno", 0)))
    return list(dict.fromkeys(edges))  # one edge per statement, however many names it imports


def import_graph() -> dict[str, list[Edge]]:
    """Every relaykit module → its run-time imports of other relaykit modules."""
    modules = frozenset(module_name(p) for p in SOURCE.rglob("*.py"))
    return {name: imports_of(name, modules) for name in sorted(modules)}


def strongly_connected(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The groups of modules that import each other (Tarjan, iterative), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[Edge]]] = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            edge = next(edges, None)
            if edge is not None:
                child = edge.imported
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups, key=lambda g: (-len(g), g))


def a_cycle(group: list[str], graph: dict[str, list[Edge]]) -> list[Edge]:
    """One shortest import cycle through the first module of ``group`` (breadth first)."""
    members = set(group)
    start = group[0]
    came_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for edge in graph[node]:
                if edge.imported not in members or edge.imported in came_by:
                    continue
                came_by[edge.imported] = edge
                if edge.imported == start:
                    cycle = [edge]
                    while cycle[0].importer != start:
                        cycle.insert(0, came_by[cycle[0].importer])
                    return cycle
                following.append(edge.imported)
        frontier = following
    return []


def describe_cycles(groups: list[list[str]], graph: dict[str, list[Edge]]) -> str:
    """Each group of modules in a cycle: one shortest cycle, then every import inside it (an
    allow-listed import is marked with its reason)."""
    lines: list[str] = []
    for group in groups:
        lines.append(f"- cycle among {', '.join(group)}; for example:")
        lines.extend(f"    {edge}" for edge in a_cycle(group, graph))
        lines.append("  every import inside it:")
        for edge in (e for m in group for e in graph[m] if e.imported in group):
            reason = ALLOWED_CYCLE_EDGES.get((edge.importer, edge.imported))
            lines.append(f"    {edge}" + (f"  [allowed: {reason}]" if reason else ""))
    return "\n".join(lines)


def without(graph: dict[str, list[Edge]], dropped: set[tuple[str, str]]) -> dict[str, list[Edge]]:
    return {
        name: [e for e in edges if (e.importer, e.imported) not in dropped]
        for name, edges in graph.items()
    }


# -- tests -------------------------------------------------------------------------------------
def test_the_import_graph_reader_sees_function_level_imports_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\nimport relaykit.errors\n"
        "if TYPE_CHECKING:\n    from relaykit import codec\nelse:\n    import json\n"
        "def f():\n    from relaykit.messages import Message\n"
    )
    tree = ast.parse(source)
    found = {
        n.names[0].name for n in run_time_nodes(tree) if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert found == {"TYPE_CHECKING", "relaykit.errors", "json", "Message"}


def test_the_cycle_finder_reports_every_cycle_with_its_imports() -> None:
    def edges(importer: str, *imported: str) -> list[Edge]:
        return [Edge(importer, m, i + 1) for i, m in enumerate(imported)]

    graph = {
        "relaykit.a": edges("relaykit.a", "relaykit.b"),
        "relaykit.b": edges("relaykit.b", "relaykit.a", "relaykit.c"),
        "relaykit.c": edges("relaykit.c", "relaykit.d"),
        "relaykit.d": edges("relaykit.d", "relaykit.e"),
        "relaykit.e": edges("relaykit.e", "relaykit.c"),
        "relaykit.f": edges("relaykit.f", "relaykit.a"),
    }
    groups = strongly_connected(graph)
    assert groups == [["relaykit.c", "relaykit.d", "relaykit.e"], ["relaykit.a", "relaykit.b"]]
    assert [str(e.imported) for e in a_cycle(groups[0], graph)] == [
        "relaykit.d",
        "relaykit.e",
        "relaykit.c",
    ]
    assert strongly_connected(without(graph, {("relaykit.e", "relaykit.c")})) == [
        ["relaykit.a", "relaykit.b"]
    ]


def test_the_codec_does_not_import_the_messages() -> None:
    graph = import_graph()
    codec_modules = [m for m in graph if m == "relaykit.codec" or m.startswith("relaykit._codec")]
    assert "relaykit.codec" in codec_modules
    bad = [str(e) for m in codec_modules for e in graph[m] if e.imported == "relaykit.messages"]
    assert not bad, "the codec imports relaykit.messages:\n" + "\n".join(bad)
    for importer, imported in FORBIDDEN_EDGES:
        assert not any(e.imported == imported for e in graph[importer]), (
            f"{importer} imports {imported}: {FORBIDDEN_EDGES[importer, imported]}"
        )


def test_relaykit_modules_do_not_import_each_other_in_a_cycle() -> None:
    graph = import_graph()
    allowed = set(ALLOWED_CYCLE_EDGES)
    assert not allowed & set(FORBIDDEN_EDGES), "a forbidden import cannot be allow-listed"
    found = strongly_connected(graph)
    remaining = strongly_connected(without(graph, allowed))
    # Show the cycles the allow-list excuses, and the entries that excuse nothing any more.
    if found:
        print("import cycles in relaykit (allow-listed imports marked):")
        print(describe_cycles(found, graph))
    existing = {(e.importer, e.imported) for edges in graph.values() for e in edges}
    in_a_cycle = {
        (e.importer, e.imported)
        for group in found
        for m in group
        for e in graph[m]
        if e.imported in group
    }
    for pair in sorted(allowed - in_a_cycle):
        state = "closes no cycle any more" if pair in existing else "no longer exists"
        print(f"ALLOWED_CYCLE_EDGES entry {pair[0]} -> {pair[1]} {state}: remove it")
    assert not remaining, (
        "relaykit modules import each other in a cycle (move the shared "
        "piece down, or let the lower module offer a registration hook, "
        "rather than import upwards):\n" + describe_cycles(remaining, graph)
    )


def test_import_relaykit_loads_no_optional_extra() -> None:
    code = (
        "import sys, relaykit\n"
        f"wanted = {OPTIONAL_PACKAGES!r}\n"
        "print(' '.join(sorted({w for w in wanted for m in sys.modules "
        "if m == w or m.startswith(w + '.')})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = done.stdout.split()
    assert not loaded, f"import relaykit loads the optional packages {loaded}"
