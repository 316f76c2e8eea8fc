"""A deterministic embedder for tests: feature hashing, no model, no randomness."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ._errors import ConfigurationError

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"\w+")
# Words carry the meaning; trigrams only make near-spellings ("cafe"/"cafes") a little similar.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5


class HashEmbedder:
    """A TEST DOUBLE, not a semantic model: vectors from hashed words and character trigrams.

    Each lower-cased word token and each character trigram of ``<word>`` is hashed with BLAKE2b
    (stable across processes and machines, unlike Python's salted ``hash``) into one of ``dim``
    buckets with a sign taken from the same digest; the bucket sums are L2-normalised. So texts
    that share words have a high cosine, identical texts have cosine 1.0 (up to float32
    rounding), and unrelated texts are near 0. A text without any word character gets one fixed
    unit vector rather than NaN.

    Fast and free of model files, so tests can run the whole cache offline. ``model_id`` is
    ``"hash-v1-<dim>"``; bump the version if the features ever change, because stored vectors
    would no longer match.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 2:
            raise ConfigurationError(f"dim must be >= 2, got {dim}")
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"hash-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        # The lowest bit picks the sign, the rest the bucket: signed hashing keeps collisions
        # from adding up to a spurious similarity.
        return (value >> 1) % self._dim, 1.0 if value & 1 else -1.0

    def _vector(self, text: str) -> NDArray[np.float64]:
        vec = np.zeros(self._dim, dtype=np.float64)
        for word in _WORD.findall(text.lower()):
            index, sign = self._bucket("w:" + word)
            vec[index] += sign * _WORD_WEIGHT
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                index, sign = self._bucket("c:" + padded[i : i + 3])
                vec[index] += sign * _TRIGRAM_WEIGHT
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # No features (empty or punctuation-only text), or features that cancelled out.
            vec[:] = 0.0
            vec[0] = 1.0
            return vec
        result: NDArray[np.float64] = vec / norm
        return result

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if isinstance(texts, str):
            raise ConfigurationError("embed() takes a sequence of texts, not one str")
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._vector(text)
        return out

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self._dim})"
