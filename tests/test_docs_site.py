"""The documentation site (mkdocs.yml): every public module has an API reference page in its nav.

A public module is ``llmcache`` or any of its submodules and subpackages whose name has no
leading underscore; a new one without a page (``docs/reference/<module>.md`` holding a
``::: <module>`` directive, listed in the nav) fails here. The site itself is built by
``mkdocs build --strict`` in ``.ci/run``.
"""

from __future__ import annotations

import importlib.util
import logging
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import llmcache

ROOT = Path(__file__).resolve().parent.parent


def _public_modules() -> set[str]:
    return {"llmcache"} | {
        f"llmcache.{m.name}"
        for m in pkgutil.iter_modules(llmcache.__path__)
        if not m.name.startswith("_")
    }


def _nav_pages() -> list[str]:
    # The nav's page files, read without a YAML parser: `- Title: path.md` or `- path.md`,
    # commented lines skipped.
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1]
    pages = []
    for line in nav.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = re.search(r"([\w./-]+\.md)\s*$", line)
        if m:
            pages.append(m.group(1))
    return pages


def _documented_modules() -> dict[str, str]:
    """module -> the nav page whose ``::: module`` directive renders it."""
    found = {}
    for page in _nav_pages():
        path = ROOT / "docs" / page
        if not path.exists():
            continue
        for m in re.finditer(r"^:::\s+([\w.]+)\s*$", path.read_text(encoding="utf-8"), re.M):
            found[m.group(1)] = page
    return found


def test_every_public_module_has_a_reference_page_in_the_nav() -> None:
    public = _public_modules()
    # The modules llmcache's own docstring and tests/test_public_api.py name, at least.
    assert {"llmcache.storage", "llmcache.testing", "llmcache.llm", "llmcache.proxy"} <= public
    documented = _documented_modules()
    missing = sorted(public - documented.keys())
    assert not missing, f"public modules without an API reference page in mkdocs.yml: {missing}"
    # And no page renders a module that is not public (a private one, or one since removed).
    assert set(documented) <= public, sorted(set(documented) - public)


def test_the_nav_names_only_pages_that_exist() -> None:
    missing = [p for p in _nav_pages() if not (ROOT / "docs" / p).exists()]
    assert not missing, missing


def test_the_site_builds_offline() -> None:
    # No web fonts, and no plugin that downloads at build time.
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+font: false$", text, re.M)
    plugins = text.split("\nplugins:\n", 1)[1].split("\n\n", 1)[0]
    assert not re.search(r"\b(social|privacy|optimize|git-revision-date)\b", plugins)
    assert re.search(r"^docs_dir: docs$", text, re.M)


def _hook(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "_hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_that_leave_docs_are_checked_and_rewritten(caplog: pytest.LogCaptureFixture) -> None:
    links = _hook("repository_links")
    docs, page_dir = ROOT / "docs", ROOT / "docs" / "results" / "quick"

    def rewrite(line: str, repo_url: str = "") -> str:
        return str(links._rewrite_line(line, page_dir, docs, ROOT, repo_url, "p.md"))

    # Inside docs/: left to MkDocs, which validates it.
    assert rewrite("[b](../../wrong-hit-budget.md#x)") == "[b](../../wrong-hit-budget.md#x)"
    # A repository file: named as code without a forge, linked on the forge with one.
    assert rewrite("see [the study](../../../experiments/README.md)") == (
        "see the study (`experiments/README.md`)"
    )
    assert rewrite("[`README.md`](../../../README.md)") == "`README.md`"
    assert rewrite("[code](../../../llmcache/replay.py#L3)", "https://forge.example/o/r") == (
        "[code](https://forge.example/o/r/blob/main/llmcache/replay.py#L3)"
    )
    # Code spans and external links are not links.
    assert rewrite("`[x](../../../README.md)` [w](https://x.org)") == (
        "`[x](../../../README.md)` [w](https://x.org)"
    )
    # A target that does not exist is a warning (an error under --strict), the link kept.
    with caplog.at_level(logging.WARNING):
        assert rewrite("[gone](../../../no-such-file.md)") == "[gone](../../../no-such-file.md)"
    assert "does not exist" in caplog.text


def test_doctest_examples_in_docstrings_become_code_blocks() -> None:
    docstrings = _hook("docstrings")
    text = "Intro.\n\n>>> fake.calls[0][\"model\"]\n'm'\n\nAfter :mod:`llmcache.storage`."
    fenced = docstrings._fence_doctests(text)
    assert fenced == "Intro.\n\n```pycon\n>>> fake.calls[0][\"model\"]\n'm'\n```\n\nAfter " + (
        ":mod:`llmcache.storage`."
    )
    assert docstrings._ROLE.sub(r"`\1`", fenced).endswith("After `llmcache.storage`.")


def test_the_readme_reads_in_five_minutes() -> None:
    # Issue 57: at most about 150 lines, leading with what it is, the two commands and code;
    # everything else lives on the site's pages, which it links.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:3] == ["Two commands", "Ten lines", "What you get on real traffic"]
    for page in ("get-started", "adopt", "replay-and-tune", "guards", "postgres", "proxy", "study"):
        assert f"](docs/{page}.md" in text, page
