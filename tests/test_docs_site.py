"""The documentation site (mkdocs.yml): every public module has an API reference page in its nav.

A public module is ``llmcache`` or any of its submodules and subpackages whose name has no
leading underscore; a new one without a page (``docs/reference/<module>.md`` holding a
``::: <module>`` directive, listed in the nav) fails here. The site itself is built by
``mkdocs build --strict`` in ``.ci/run``.
"""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

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
