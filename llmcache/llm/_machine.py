"""What CPU a run had: its model name and its widest vector instructions.

Figures measured with the local runtime depend on both (llama.cpp is built for x86-64-v3 and
onnxruntime picks its kernels at run time), so benchmarks and recorded runs name them.
"""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_model", "vector_isa"]


def _cpuinfo(key: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what the platform reports."""
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "unknown CPU"


def vector_isa() -> str:
    """``AVX-512``, ``AVX2`` or ``no AVX2``, from ``/proc/cpuinfo``'s flags (Linux)."""
    flags = _cpuinfo("flags")
    if flags is None:
        return "unknown"
    found = set(flags.split())
    if "avx512f" in found:
        return "AVX-512"
    return "AVX2" if "avx2" in found else "no AVX2"
