"""The public surface: what `import llmcache` promises."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import llmcache
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
    assert len(errors) == 8
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
    "AsyncCachedLLM",
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
    "ExactIndex",
    "FilledPrompt",
    "HnswIndex",
    "InvalidResponseError",
    "LLMBackend",
    "LLMCacheError",
    "LLMConnection",
    "LLMKind",
    "Limits",
    "LocalBackend",
    "LocalServer",
    "LocalServerError",
    "Manifest",
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
    "__version__",
    "connect_llm",
    "embedding_text",
    "messages_text",
    "read_records",
    "resolve_llm_backend",
    "transfer",
}


def test_exported_members() -> None:
    assert set(llmcache.__all__) == EXPECTED_PUBLIC_NAMES
    assert len(llmcache.__all__) == len(EXPECTED_PUBLIC_NAMES)  # no name listed twice
    public = {name for name in vars(llmcache) if not name.startswith("_")}
    # Whatever else `import llmcache` binds is a submodule (llmcache.local, llmcache.testing)
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
