"""Griffe extension for the API reference: the project's reST-ish docstrings read as Markdown.

The docstrings are written for ``help()`` and doctest: ``>>>`` examples and Sphinx roles
(``:mod:`llmcache.storage```). Markdown would read a ``>>>`` line as nested block quotes and
its ``[0]["model"]`` as a reference link, so each run of doctest lines (and the output lines
that follow, up to a blank line) becomes a ``pycon`` code block, and a role becomes code.
The docstrings themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:mod|class|func|meth|attr|exc|data|obj|const|ref|term):`~?([^`]+)`")


def _fence_doctests(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
                i += 1
            out.extend([f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"])
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class ReadableDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        value = _fence_doctests(obj.docstring.value)
        obj.docstring.value = _ROLE.sub(lambda m: f"`{m.group(1)}`", value)
