"""The LLM runtime's modules stand in layers: none imports another one's private names, and no two
import each other (directly or round a longer loop), so each can be read from the bottom up."""

from __future__ import annotations

import ast
from pathlib import Path

import llmcache.llm

ROOT = Path(llmcache.llm.__file__).resolve().parent


def _sibling_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every ``from .module import name`` in the file, wherever it stands
    (a lazy import inside a function ties two modules as much as one at the top)."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.extend((node.module, alias.name) for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    return {path.stem: {m for m, _ in _sibling_imports(path)} for path in ROOT.glob("*.py")}


def _loop(graph: dict[str, set[str]]) -> list[str]:
    """One import loop of ``graph`` as a path of module names, or ``[]`` when there is none."""
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> list[str]:
        if module in trail:
            return [*trail[trail.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph.get(module, ())):
            loop = visit(imported, [*trail, module])
            if loop:
                return loop
        done.add(module)
        return []

    for start in sorted(graph):
        loop = visit(start, [])
        if loop:
            return loop
    return []


def test_no_runtime_module_takes_another_ones_private_names() -> None:
    offenders = [
        f"{path.name}: {module}.{name}"
        for path in sorted(ROOT.glob("*.py"))
        for module, name in _sibling_imports(path)
        if name.startswith("_")
    ]
    assert offenders == []


def test_the_runtime_modules_import_each_other_one_way() -> None:
    graph = _graph()
    # The scan sees the imports that matter: the layers binary -> weights -> server -> choice.
    assert "_runtime" in graph["_models"] and "_runtime" in graph["_server"]
    assert "_models" in graph["_server"] and "_server" in graph["_config"]
    assert _loop(graph) == []


def test_the_loop_finder_finds_a_loop() -> None:
    # The check above only means something if a loop would be reported.
    assert _loop({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _loop({"a": {"b"}, "b": set()}) == []
