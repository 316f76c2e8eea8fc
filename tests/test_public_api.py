"""The public surface: what `import llmcache` promises."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import llmcache
import llmcache.llm
from llmcache import CacheOptions, LLMCacheError
from llmcache._keys import partition_for


def test_all_names_exist_are_public_and_sorted() -> None:
    assert llmcache.__all__ == sorted(llmcache.__all__)
    for name in llmcache.__all__:
        assert hasattr(llmcache, name), name
        obj = getattr(llmcache, name)
        module = getattr(obj, "__module__", "llmcache")
        # Everything public is re-exported from a private module or llmcache itself.
        assert module.startswith("llmcache"), (name, module)


def test_every_error_derives_from_the_one_root() -> None:
    errors = [
        getattr(llmcache, n)
        for n in llmcache.__all__
        if inspect.isclass(getattr(llmcache, n)) and issubclass(getattr(llmcache, n), Exception)
    ]
    assert len(errors) == 7
    assert all(issubclass(e, LLMCacheError) for e in errors)
    # The tree in the root's module docstring names every one of them.
    doc = inspect.getmodule(LLMCacheError).__doc__ or ""  # type: ignore[union-attr]
    assert all(e.__name__ in doc for e in errors)


def test_scheduling_hints_do_not_split_tables_but_sampling_params_do() -> None:
    options = CacheOptions(category="c", agent="a")
    base = {"model": "m", "messages": []}
    plain = partition_for(options, base)
    hinted = partition_for(options, {**base, "extra_body": {"id_slot": 3, "cache_prompt": True}})
    sampled = partition_for(options, {**base, "extra_body": {"top_k": 5}})
    assert plain.key == hinted.key
    assert plain.key != sampled.key


def test_docstring_examples_run() -> None:
    import doctest

    import llmcache.testing

    result = doctest.testmod(llmcache.testing)
    assert result.attempted >= 3 and result.failed == 0


# Every public name, spelt out: adding or removing one is a decision, made here as well.
EXPECTED_PUBLIC_NAMES = {
    "Adapted",
    "AsyncCachedLLM",
    "AutoIndex",
    "BoundedBackend",
    "CacheBackend",
    "CacheConfig",
    "CacheEntry",
    "CacheOptions",
    "CacheStats",
    "CachedLLM",
    "CallInfo",
    "Candidate",
    "CategoryPolicy",
    "Choose",
    "ConfigurationError",
    "CorruptEntryError",
    "EmbedMode",
    "Embedder",
    "EmbedderError",
    "EmbedderMismatchError",
    "Equivalence",
    "ExactIndex",
    "FilledPrompt",
    "HnswIndex",
    "InvalidResponseError",
    "LLMCacheError",
    "LLMVerifier",
    "Limits",
    "LocalBackend",
    "Manifest",
    "BatchingEmbedder",
    "MemoEmbedder",
    "MiniLMEmbedder",
    "Mode",
    "Modifier",
    "ModifyContext",
    "OpenAIEmbedder",
    "Partition",
    "PgBackend",
    "Price",
    "PriceTable",
    "PromptTemplate",
    "Read",
    "RecordedCall",
    "Recorder",
    "Revise",
    "SemanticCache",
    "Similarity",
    "StoreError",
    "TableStats",
    "Usage",
    "Validator",
    "VectorIndex",
    "Verdict",
    "Verifier",
    "__version__",
    "default_embedder",
    "embedding_text",
    "messages_text",
    "read_records",
    "same_answer",
    "transfer",
}


def test_exported_members() -> None:
    assert set(llmcache.__all__) == EXPECTED_PUBLIC_NAMES
    assert len(llmcache.__all__) == len(EXPECTED_PUBLIC_NAMES)  # no name listed twice
    public = {name for name in vars(llmcache) if not name.startswith("_")}
    # Whatever else `import llmcache` binds is a submodule (llmcache.llm, llmcache.testing)
    # or the `from __future__ import annotations` of its __init__.
    others = {
        n for n in public - EXPECTED_PUBLIC_NAMES if not inspect.ismodule(getattr(llmcache, n))
    }
    assert others <= {"annotations"}


# Code that uses llmcache as its users do: through `import llmcache` and its public modules.
USERS = ("agent_core", "experiments", "examples", "notebooks", "benchmarks", "scripts")


def _private_imports(source: str) -> list[str]:
    """The private llmcache modules (``llmcache._x``) a piece of Python source imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "llmcache" and any(part.startswith("_") for part in parts[1:]):
                found.append(name)
    return found


def _sources(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [path.read_text("utf-8")]
    cells = json.loads(path.read_text("utf-8"))["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    # IPython's magics and shell escapes are not Python.
    return [
        "\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
        for cell in code
    ]


def test_the_private_import_scan_finds_each_kind_of_import() -> None:
    source = """
import llmcache._keys
from llmcache._types import CallInfo
from llmcache import _core, CachedLLM
from llmcache.testing import FakeOpenAI
import importlib; importlib.import_module("llmcache._ledger")
"""
    assert _private_imports(source) == [
        "llmcache._keys",
        "llmcache._types",
        "llmcache._types.CallInfo",
        "llmcache._core",
        "llmcache._ledger",
    ]


def test_nothing_outside_llmcache_imports_its_private_modules() -> None:
    # The town, the experiments, the examples, the notebooks, the benchmarks and the scripts
    # use llmcache as its users do: through `import llmcache` and its public modules.
    root = Path(__file__).resolve().parent.parent
    offenders = {}
    scanned = 0
    for folder in USERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in {".py", ".ipynb"} or ".ipynb_checkpoints" in path.parts:
                continue
            scanned += 1
            found = [name for source in _sources(path) for name in _private_imports(source)]
            if found:
                offenders[str(path.relative_to(root))] = found
    assert (root / "experiments" / "_evaluate.py").exists()  # the scan looks where the code is
    assert scanned > 20
    assert offenders == {}


def test_the_llm_runtime_has_its_own_public_surface() -> None:
    runtime = llmcache.llm
    assert len(set(runtime.__all__)) == len(runtime.__all__)  # ruff keeps it sorted (RUF022)
    for name in runtime.__all__:
        obj = getattr(runtime, name)
        module = getattr(obj, "__module__", "llmcache.llm")
        assert module.startswith("llmcache.llm"), (name, module)
    errors = [
        obj
        for obj in (getattr(runtime, n) for n in runtime.__all__)
        if inspect.isclass(obj) and issubclass(obj, Exception)
    ]
    assert [e.__name__ for e in errors] == ["LocalServerError"]
    # Its errors hang from the one root, and the root's tree names them.
    assert all(issubclass(e, LLMCacheError) for e in errors)
    doc = inspect.getmodule(LLMCacheError).__doc__ or ""  # type: ignore[union-attr]
    assert all(e.__name__ in doc for e in errors)


def _imported_modules(tree: ast.AST, package: str) -> list[tuple[str, bool]]:
    """Every module an import statement names, resolved against ``package``, and whether the
    statement runs at import time (module level) rather than inside a function."""
    inside_functions: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside_functions.update(id(child) for child in ast.walk(node) if child is not node)
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        at_import_time = id(node) not in inside_functions
        if isinstance(node, ast.Import):
            found.extend((alias.name, at_import_time) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from llmcache import llm` names the runtime through its parent.
            found.extend((f"{base}.{alias.name}", at_import_time) for alias in node.names)
            found.append((base, at_import_time))
    return found


def test_the_cache_core_never_imports_the_llm_runtime() -> None:
    # One distribution, one import root, one direction: `llmcache.llm` uses the cache's public
    # names; the cache (llmcache/_*.py, llmcache/__init__.py, llmcache/testing.py) never
    # imports the runtime. The command line may, inside the one command that runs the server.
    root = Path(llmcache.__file__).resolve().parent
    core = sorted(p for p in root.glob("*.py"))
    assert {"__init__.py", "_core.py", "__main__.py"} <= {p.name for p in core}
    offenders = []
    for path in core:
        imports = _imported_modules(ast.parse(path.read_text("utf-8")), "llmcache")
        for module, at_import_time in imports:
            runtime = module == "llmcache.llm" or module.startswith("llmcache.llm.")
            if runtime and (at_import_time or path.name != "__main__.py"):
                offenders.append(f"{path.name}: {module}")
    assert offenders == []
    # The scan does see imports: the CLI's lazy one, and the runtime's own imports of the core.
    main = _imported_modules(ast.parse((root / "__main__.py").read_text("utf-8")), "llmcache")
    assert ("llmcache.llm._serve", False) in main
    runtime = _imported_modules(
        ast.parse((root / "llm" / "_config.py").read_text("utf-8")), "llmcache.llm"
    )
    assert ("llmcache", True) in runtime


def test_the_llm_runtime_uses_only_the_caches_public_names() -> None:
    root = Path(llmcache.llm.__file__).resolve().parent
    offenders = [
        f"{path.name}: {module}"
        for path in sorted(root.glob("*.py"))
        for module, _ in _imported_modules(ast.parse(path.read_text("utf-8")), "llmcache.llm")
        if module.startswith("llmcache._")
    ]
    assert offenders == []
