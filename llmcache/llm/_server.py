"""llama.cpp's ``llama-server`` on this machine: starting it, stopping it, talking to it.

:class:`LocalServer` starts ``llama-server`` on a free loopback port, waits until the model is
loaded, and hands out plain ``openai.OpenAI`` clients that talk to it.

The server runs in llama.cpp's *router* mode: one process and one URL for both tiers; the
``model`` field of a request picks the model (an unknown name is a 400 error, never a silent
fallback), and each model runs in a child process of the router. The default model is loaded
before ``start`` returns; the superior one on its first request, so a run that never escalates
never pays for it.

The router is stopped by PID when the ``with`` block ends, whether it ends normally, by an
exception (a failing test) or by Ctrl-C; routers still running when the interpreter exits are
stopped by an ``atexit`` hook, and on Linux the router also receives SIGTERM if the process that
started it dies without running Python's exit hooks (``PR_SET_PDEATHSIG``). The model processes
exit with their router, also when it is killed with SIGKILL. Everything they print goes to one
log file (:attr:`LocalServer.log_path`), the model presets beside it.

Where ``llama-server`` comes from, and why llmcache only runs it and never imports its package:
:mod:`._runtime`.

Threads
-------
llama.cpp's threads spin-wait for each other at every step. When another process holds a core,
a thread that is descheduled stalls the others, for generation and for batched decoding alike.
That is why nothing else should run on the cores beside a long study. A caller that waits for
its answer leaves the cores free, so generation and prompt processing both use every core by
default (:func:`default_threads`); that was faster on the town's prompts than leaving a core
free (``docs/local-llm.md``, *Threads*). Leave a core free (``threads=``) only where other work
must run beside the server.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import logging
import os
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

from ._defaults import (
    DEFAULT_CTX_PER_SLOT,
    DEFAULT_MODEL,
    DEFAULT_PARALLEL,
    LOCAL_CACHE_RAM_MIB,
    LOCAL_STARTUP_TIMEOUT,
    LOCAL_TIMEOUT,
    SUPERIOR_CTX_PER_SLOT,
    SUPERIOR_PARALLEL,
)
from ._errors import LocalServerError
from ._models import MODELS, find_model, model_alias
from ._runtime import find_llama_server

if TYPE_CHECKING:
    import openai

__all__ = ["LocalServer", "default_threads"]

_log = logging.getLogger(__name__)


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
    """Every core: a caller that waits for its answer leaves them free (see the module
    docstring for when to leave one free instead)."""
    return max(1, os.cpu_count() or 1)


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
        threads: generation threads (default :func:`default_threads`: every core; see the
            module docstring).
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
    fails for a missing install; starting it raises :class:`~llmcache.llm.LocalServerError` with
    the command that fixes it.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        superior_model: str | os.PathLike[str] | None = None,
        parallel: int = DEFAULT_PARALLEL,
        ctx_per_slot: int = DEFAULT_CTX_PER_SLOT,
        superior_parallel: int = SUPERIOR_PARALLEL,
        superior_ctx_per_slot: int = SUPERIOR_CTX_PER_SLOT,
        threads: int | None = None,
        threads_batch: int | None = None,
        cache_ram_mib: int = LOCAL_CACHE_RAM_MIB,
        preload_superior: bool = False,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = LOCAL_STARTUP_TIMEOUT,
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
        self.threads_batch = threads_batch or default_threads()
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
        :class:`~llmcache.llm.LocalServerError`.
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
        """An ``openai.OpenAI`` client for this server (keyword arguments pass through).

        Unless ``http_client`` is given, its transport ends schema-constrained answers where
        their JSON ends (:mod:`._json_end`): llama.cpp's grammar would let them run on in
        whitespace up to ``max_tokens``.
        """
        import openai

        from ._json_end import JSONEndTransport

        kwargs.setdefault("api_key", "sk-local-no-key")
        kwargs.setdefault("timeout", LOCAL_TIMEOUT)
        if "http_client" not in kwargs:
            kwargs["http_client"] = openai.DefaultHttpxClient(
                transport=JSONEndTransport(self.root_url)
            )
        return openai.OpenAI(base_url=self.base_url, **kwargs)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """The async twin of :meth:`client`."""
        import openai

        from ._json_end import AsyncJSONEndTransport

        kwargs.setdefault("api_key", "sk-local-no-key")
        kwargs.setdefault("timeout", LOCAL_TIMEOUT)
        if "http_client" not in kwargs:
            kwargs["http_client"] = openai.DefaultAsyncHttpxClient(
                transport=AsyncJSONEndTransport(self.root_url)
            )
        return openai.AsyncOpenAI(base_url=self.base_url, **kwargs)

    def slot_for(self, key: str, model: str | None = None) -> int:
        """A stable slot number for ``key`` (e.g. an agent's name), for ``extra_body["id_slot"]``.

        Usually better left alone: without it the server picks the slot whose cached prompt is
        most similar and restores prefixes from its RAM cache; pinning more agents than slots
        made them evict each other in the benchmark (``docs/local-llm.md``).
        """
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") % self.parallel_of(model)
