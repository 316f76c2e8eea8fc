"""What the client tests share: a cached client over a fake, and call options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmcache import CacheConfig, CachedLLM, CacheOptions, SemanticCache
from llmcache.testing import HashEmbedder


def make(tmp_path: Path, fake: Any, **config: Any) -> CachedLLM:
    """A CachedLLM over ``fake`` with a fresh cache and a recorder, configured by ``config``."""
    cache = SemanticCache(
        tmp_path / "c", embedder=HashEmbedder(dim=64), config=CacheConfig(**config)
    )
    return CachedLLM(fake, cache=cache, recorder=tmp_path / "rec.jsonl")


def opts(**kw: Any) -> CacheOptions:
    """Cache options of one call: the importance of a memory, unless ``kw`` says otherwise."""
    base: dict[str, Any] = {"category": "importance", "agent": "Liam", "keywords": ["tree idle"]}
    base.update(kw)
    return CacheOptions(**base)
