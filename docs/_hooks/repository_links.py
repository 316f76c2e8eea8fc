"""MkDocs hook: links from a docs page to a repository file outside ``docs/``.

The pages are plain Markdown that also read on a forge, where ``../README.md`` or
``../llmcache/storage.py`` is a working relative link. The site holds ``docs/`` alone, so
MkDocs would report such a link as not found. This hook checks that the target exists in the
repository (a missing one is a warning, which fails ``mkdocs build --strict``) and rewrites it:
to the file on the forge when ``repo_url`` is set in mkdocs.yml, otherwise to the repository
path as code (``README.md``), which is what a reader of the built site can look up.
Links inside ``docs/`` are left to MkDocs, which validates them itself.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repository_links")

# [text](target) and [text](target "title"), images too; not inside code spans or fences.
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.I)
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _rewrite_line(
    line: str, page_dir: Path, docs_dir: Path, root: Path, repo_url: str, where: str
) -> str:
    spans = [m.span() for m in _CODE_SPAN.finditer(line)]

    def replace(m: re.Match[str]) -> str:
        if any(a <= m.start() < b for a, b in spans):
            return m.group(0)
        bang, text, target, title = m.groups()
        if _EXTERNAL.match(target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = Path(posixpath.normpath((page_dir / path).as_posix()))
        try:
            resolved.relative_to(docs_dir)
            return m.group(0)  # inside docs/: MkDocs validates it
        except ValueError:
            pass
        try:
            rel = resolved.relative_to(root).as_posix()
        except ValueError:
            log.warning("%s: link %r leaves the repository", where, target)
            return m.group(0)
        if not resolved.exists():
            log.warning("%s: link %r points at %s, which does not exist", where, target, rel)
            return m.group(0)
        if repo_url:
            kind = "tree" if resolved.is_dir() else "blob"
            url = f"{repo_url.rstrip('/')}/{kind}/main/{rel}" + (f"#{anchor}" if anchor else "")
            return f"{bang}[{text}]({url}{title})"
        # No forge configured: name the repository file instead of linking it.
        shown = rel + ("/" if resolved.is_dir() else "")
        return text if f"`{shown}`" in text or text.strip("`") == shown else f"{text} (`{shown}`)"

    return _LINK.sub(replace, line)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    page_dir = (docs_dir / page.file.src_uri).parent
    repo_url = config.get("repo_url") or ""
    out = []
    fence = None
    for line in markdown.split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            out.append(line)
            continue
        if opened:
            fence = opened.group(1)
            out.append(line)
            continue
        out.append(_rewrite_line(line, page_dir, docs_dir, root, repo_url, page.file.src_uri))
    return "\n".join(out)
