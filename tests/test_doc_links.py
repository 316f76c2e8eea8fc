"""Every relative link in the project's Markdown points at a file the repository tracks.

A link to a file that exists only on the machine that wrote it (an ignored output directory, a
file never added) reads as evidence and is not there on a clone: the standard study's report was
linked from the README for a day while ``.gitignore`` kept it out of every commit.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# [text](target) and [text](target "title"); images too. Reference-style links are not used here.
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_EXTERNAL = ("http://", "https://", "mailto:", "#")


def _git(*args: str) -> list[str]:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [line for line in out.splitlines() if line]


def _tracked() -> set[str]:
    # Files added but not yet committed count: the test then passes before the commit that
    # adds both a link and its target.
    return set(_git("ls-files", "--cached"))


def _links(md: Path) -> list[tuple[int, str]]:
    found = []
    in_fence = False
    for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        found.extend((number, m.group(1)) for m in _LINK.finditer(line))
    return found


def test_relative_links_point_at_tracked_files() -> None:
    tracked = _tracked()
    tracked_dirs = {str(Path(p).parent) for p in tracked}
    broken = []
    for name in sorted(p for p in tracked if p.endswith(".md")):
        md = ROOT / name
        for number, target in _links(md):
            if target.startswith(_EXTERNAL):
                continue
            path = target.split("#", 1)[0]
            rel = (md.parent / path).resolve().relative_to(ROOT).as_posix()
            if rel not in tracked and rel not in tracked_dirs and rel != ".":
                broken.append(f"{name}:{number}: {target}")
    assert not broken, "links to files the repository does not track:\n" + "\n".join(broken)


def test_the_link_pattern_finds_links_and_skips_code(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text(
        'See [a](docs/a.md) and ![fig](f.png "title").\n'
        "`[not](a link)`\n```\n[also not](code.md)\n```\n[b](https://x.org)\n",
        encoding="utf-8",
    )
    assert _links(md) == [(1, "docs/a.md"), (1, "f.png"), (6, "https://x.org")]


def test_generated_output_directories_are_ignored_only_at_the_root() -> None:
    """``results/`` at the root is a study's scratch output; ``docs/results/`` is evidence that
    must be committable."""
    ignored = _git("check-ignore", "--no-index", "results/x.md", "runs/x.jsonl")
    assert ignored == ["results/x.md", "runs/x.jsonl"]
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "docs/results/standard/report.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, f"docs/results is ignored: {out.stdout}"
