"""The public surface: what `import llmcache` promises."""

from __future__ import annotations

import inspect

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


def test_nothing_outside_llmcache_imports_its_private_modules() -> None:
    # The town, the experiments, the examples and the notebooks use llmcache as its users do:
    # through `import llmcache` (benchmarks may time private parts, such as one index, alone).
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    private = re.compile(r"(from|import)\s+llmcache\._")
    offenders = []
    for folder in ("agent_core", "experiments", "examples", "notebooks"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in {".py", ".ipynb"} and private.search(path.read_text("utf-8")):
                offenders.append(str(path.relative_to(root)))
    assert (root / "experiments" / "_evaluate.py").exists()  # the scan looks where the code is
    assert offenders == []
