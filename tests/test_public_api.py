"""The public surface: what `import llmcache` and its public submodules promise, in tiers."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from pathlib import Path

import llmcache
import llmcache.llm
from llmcache import CacheOptions, LLMCacheError
from llmcache._filing import partition_for

# Every public name, spelt out by the module it lives in: adding, moving or removing one is a
# decision, made here as well. The top level is what a user of the drop-in client needs; the
# parts behind it have a submodule each.
SURFACE: dict[str, set[str]] = {
    "llmcache": {
        "AsyncCachedLLM",
        "CacheConfig",
        "CacheOptions",
        "CacheStats",
        "CachedLLM",
        "CallInfo",
        "CategoryPolicy",
        "EmbedMode",
        "LLMCacheError",
        "Mode",
        "PromptTemplate",
        "SemanticCache",
        "__version__",
    },
    "llmcache.errors": {
        "ConfigurationError",
        "CorruptEntryError",
        "EmbedderError",
        "EmbedderMismatchError",
        "InvalidResponseError",
        "LLMCacheError",
        "ReplayError",
        "ReplayInputError",
        "StoreError",
    },
    "llmcache.storage": {
        "BoundedBackend",
        "CacheBackend",
        "Limits",
        "LocalBackend",
        "Manifest",
        "PgBackend",
        "open_backend",
        "transfer",
    },
    "llmcache.index": {"AutoIndex", "ExactIndex", "HnswIndex", "VectorIndex"},
    "llmcache.templates": {
        "LearnedTemplate",
        "Recognition",
        "TemplateLearner",
        "TemplateSet",
        "code_site",
        "load_templates",
        "text_alone",
    },
    "llmcache.embedders": {
        "BatchingEmbedder",
        "Embedder",
        "MemoEmbedder",
        "MiniLMEmbedder",
        "OpenAIEmbedder",
        "StoredEmbedder",
        "default_embedder",
        "embedding_text",
        "messages_text",
    },
    "llmcache.modifiers": {"Choose", "HitStep", "Modifier", "ModifyContext", "Read", "Revise"},
    "llmcache.verification": {
        "Equivalence",
        "LLMVerifier",
        "Opposition",
        "Validator",
        "Verifier",
        "equivalence_name",
        "equivalence_named",
        "opposition",
        "Within",
        "same_answer",
    },
    "llmcache.recording": {"RecordedCall", "Recorder", "read_records"},
    # Replaying recorded traffic through a configuration, and choosing settings from it.
    "llmcache.replay": {
        "CallResult",
        "CategoryChoice",
        "Figures",
        "RecordedUpstream",
        "ReplayCall",
        "ReplayInput",
        "ReplayReport",
        "Setting",
        "TuneResult",
        "WrongHit",
        "calls_from_records",
        "check_mask",
        "embedding_texts",
        "equivalences_for",
        "figures",
        "read_calls",
        "read_recording",
        "replay",
        "select",
        "tune",
    },
    # The OpenAI-compatible caching proxy (extra [proxy]): settings and the ASGI app.
    "llmcache.proxy": {"ProxyKey", "ProxySettings", "create_app"},
    # LangChain's cache on llmcache's tables (extra [langchain]): set_llm_cache(LLMCache()).
    "llmcache.langchain": {"LLMCache", "PromptFiler"},
    "llmcache.types": {
        "Adapted",
        "CacheEntry",
        "CachedRawResponse",
        "Candidate",
        "FilledPrompt",
        "Partition",
        "Price",
        "PriceTable",
        "Similarity",
        "TableStats",
        "Usage",
        "Verdict",
    },
}


def test_each_tier_exports_exactly_its_pinned_names_sorted() -> None:
    for name, expected in SURFACE.items():
        module = importlib.import_module(name)
        exported = list(module.__all__)
        assert exported == sorted(exported), name  # ruff's RUF022 order
        assert len(set(exported)) == len(exported), name  # no name listed twice
        assert set(exported) == expected, name
        for attr in exported:
            obj = getattr(module, attr)
            # Defined in llmcache itself (a private module), re-exported here.
            assert getattr(obj, "__module__", "llmcache").startswith("llmcache"), (name, attr)


def test_the_top_level_stays_small_and_binds_nothing_unlisted() -> None:
    # About a dozen names: the drop-in client, its options and configuration, the cache, the
    # template, the stats, the error root.
    assert len(llmcache.__all__) <= 14
    public = {name for name in vars(llmcache) if not name.startswith("_")}
    # Whatever else `import llmcache` binds is a submodule or `annotations` (the
    # `from __future__ import annotations` of its __init__).
    others = {n for n in public - SURFACE["llmcache"] if not inspect.ismodule(getattr(llmcache, n))}
    assert others <= {"annotations"}


def test_every_public_name_has_one_home() -> None:
    # A name lives in one public module; the error root is the one exception (the top level
    # and the error tree both hold it).
    homes: dict[str, list[str]] = {}
    for module, names in SURFACE.items():
        for name in names:
            homes.setdefault(name, []).append(module)
    shared = {name: where for name, where in homes.items() if len(where) > 1}
    assert shared == {"LLMCacheError": ["llmcache", "llmcache.errors"]}


def test_every_error_derives_from_the_one_root() -> None:
    errors_module = importlib.import_module("llmcache.errors")
    errors = [getattr(errors_module, n) for n in errors_module.__all__]
    assert len(errors) == 9
    assert all(inspect.isclass(e) and issubclass(e, LLMCacheError) for e in errors)
    # The tree in the root's module docstring names every one of them.
    doc = inspect.getmodule(LLMCacheError).__doc__ or ""  # type: ignore[union-attr]
    assert all(e.__name__ in doc for e in errors)
    # No other public module exports an exception: they all live in the tree.
    for name in SURFACE:
        if name == "llmcache.errors":
            continue
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                assert obj is LLMCacheError, (name, attr)


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
import llmcache._filing
from llmcache._types import CallInfo
from llmcache import _cached_call, CachedLLM
from llmcache.testing import FakeOpenAI
import importlib; importlib.import_module("llmcache._ledger")
"""
    assert _private_imports(source) == [
        "llmcache._filing",
        "llmcache._types",
        "llmcache._types.CallInfo",
        "llmcache._cached_call",
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
    assert (root / "experiments" / "__main__.py").exists()  # the scan looks where the code is
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
    assert {"__init__.py", "_cached_call.py", "__main__.py"} <= {p.name for p in core}
    offenders = []
    for path in core:
        imports = _imported_modules(ast.parse(path.read_text("utf-8")), "llmcache")
        for module, at_import_time in imports:
            # Nor the proxy, which is built on the cache as the runtime is.
            runtime = any(
                module == name or module.startswith(f"{name}.")
                for name in ("llmcache.llm", "llmcache.proxy")
            )
            if runtime and (at_import_time or path.name != "__main__.py"):
                offenders.append(f"{path.name}: {module}")
    assert offenders == []
    # The scan does see imports: the CLI's lazy ones, and the runtime's own imports of the core.
    main = _imported_modules(ast.parse((root / "__main__.py").read_text("utf-8")), "llmcache")
    assert ("llmcache.llm._serve", False) in main
    assert ("llmcache.proxy._cli", False) in main
    runtime = _imported_modules(
        ast.parse((root / "llm" / "_config.py").read_text("utf-8")), "llmcache.llm"
    )
    assert ("llmcache.errors", True) in runtime


def test_the_llm_runtime_uses_only_the_caches_public_names() -> None:
    root = Path(llmcache.llm.__file__).resolve().parent
    offenders = [
        f"{path.name}: {module}"
        for path in sorted(root.glob("*.py"))
        for module, _ in _imported_modules(ast.parse(path.read_text("utf-8")), "llmcache.llm")
        if module.startswith("llmcache._")
    ]
    assert offenders == []


def test_the_proxy_uses_only_the_public_names_of_the_cache_and_the_runtime() -> None:
    root = Path(llmcache.__file__).resolve().parent / "proxy"
    imports = [
        (path.name, module)
        for path in sorted(root.glob("*.py"))
        for module, _ in _imported_modules(ast.parse(path.read_text("utf-8")), "llmcache.proxy")
    ]
    offenders = [
        f"{name}: {module}"
        for name, module in imports
        if module.startswith(("llmcache._", "llmcache.llm._"))
    ]
    assert offenders == []
    assert ("_upstream.py", "llmcache.llm.open_llm") in imports  # the scan reads the package


# -- the shape of the tree: no circles, no private names taken across modules ------------------

PACKAGES = ("llmcache", "agent_core", "experiments")


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its __init__)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _import_edges(root: Path) -> dict[str, set[str]]:
    """module -> the project's modules it imports (at module level or inside a function),
    excluding packages' __init__ re-exports, which only hand names on."""
    modules = _modules(root)
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for name, _ in _imported_modules(
            ast.parse(path.read_text("utf-8")), _package_of(module, path)
        ):
            # `from pkg import name` names a module when pkg.name is one, else pkg itself.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and modules[name].name != "__init__.py":
                targets.add(name)
        edges[module] = targets
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_module_of_the_tree_takes_part_in_an_import_circle() -> None:
    root = Path(__file__).resolve().parent.parent
    edges = _import_edges(root)
    assert len(edges) > 80 and edges["llmcache._client"]  # the scan reads the tree
    assert _cycle(edges) is None


def test_no_module_imports_another_modules_private_names() -> None:
    # A private (underscored) name is its module's own business; what two modules share is
    # public in the one that defines it.
    root = Path(__file__).resolve().parent.parent
    offenders = []
    for module, path in _modules(root).items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            # The project's own modules: relative imports, or absolute ones into its packages.
            ours = isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").split(".")[0] in PACKAGES
            )
            # `from . import _x` names a private *module* of the package: the package's own.
            submodule = isinstance(node, ast.ImportFrom) and node.level > 0 and not node.module
            if isinstance(node, ast.ImportFrom) and ours and not submodule:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offenders.append(f"{module}: from {node.module} import {alias.name}")
    assert offenders == []
