"""The memory stream: every observation, thought, reflection and conversation an agent keeps,
and retrieval by recency, importance and relevance (Park et al. 2023, thesis ch. 2).

Retrieval score = recency + importance + relevance, each min-max normalised over the agent's
memories and weighted 1. Recency decays by 0.995 per game hour since the memory was last
accessed; importance is the LLM's 1-10 score; relevance is the cosine between the memory's
embedding and the query's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from llmcache.embedders import Embedder

__all__ = ["EmbeddingMemo", "Memory", "MemoryStream", "normalise"]

MemoryKind = Literal["observation", "thought", "reflection", "chat"]

RECENCY_DECAY = 0.995  # per game hour


@dataclass
class Memory:
    id: int
    kind: MemoryKind
    description: str
    created: int  # simulation minute
    last_access: int
    importance: int
    evidence: tuple[int, ...] = ()
    subject: str = ""  # the actor or agent the memory is about, if any


class EmbeddingMemo:
    """Embeds each distinct text once; shared by all agents of a run.

    Memories repeat a lot ("Bench in Victoria Park is Idle"), so this saves most of the
    embedding work of a run.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._vectors: dict[str, NDArray[np.float32]] = {}

    def __call__(self, text: str) -> NDArray[np.float32]:
        vector = self._vectors.get(text)
        if vector is None:
            vector = np.asarray(self.embedder.embed([text])[0], dtype=np.float32)
            self._vectors[text] = vector
        return vector

    def warm(self, texts: Sequence[str]) -> None:
        """Embed the texts not seen yet in one call (what several new memories of one moment
        need; one batch costs the model little more than one text)."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if todo:
            for text, vector in zip(todo, self.embedder.embed(todo), strict=True):
                self._vectors[text] = np.asarray(vector, dtype=np.float32)

    def __len__(self) -> int:
        return len(self._vectors)


def normalise(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Min-max to [0, 1]; all-equal values map to 0.5 so that a constant component neither
    helps nor hurts any memory."""
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < 1e-12:
        return np.full_like(values, 0.5)
    return (values - lo) / (hi - lo)


@dataclass
class MemoryStream:
    """One agent's memories, with their embeddings kept in one growing matrix for fast scoring."""

    embed: EmbeddingMemo
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)  # recency, importance, relevance
    memories: list[Memory] = field(default_factory=list)
    _matrix: NDArray[np.float32] = field(default_factory=lambda: np.zeros((0, 0), np.float32))

    def __len__(self) -> int:
        return len(self.memories)

    def add(
        self,
        kind: MemoryKind,
        description: str,
        now: int,
        importance: int,
        *,
        evidence: Sequence[int] = (),
        subject: str = "",
    ) -> Memory:
        memory = Memory(
            id=len(self.memories),
            kind=kind,
            description=description,
            created=now,
            last_access=now,
            importance=max(1, min(10, int(importance))),
            evidence=tuple(evidence),
            subject=subject,
        )
        vector = self.embed(description)
        n = len(self.memories)
        if self._matrix.shape[0] <= n:
            # Grow geometrically: appending row by row would copy the matrix every time.
            grown = np.zeros((max(64, 2 * self._matrix.shape[0]), vector.shape[0]), np.float32)
            if n:
                grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._matrix[n] = vector
        self.memories.append(memory)
        return memory

    def recent(self, n: int) -> list[Memory]:
        return self.memories[-n:] if n > 0 else []

    def scores(self, query: str, now: int) -> NDArray[np.float64]:
        """The retrieval score of every memory for ``query`` at time ``now``."""
        if not self.memories:
            return np.zeros(0)
        n = len(self.memories)
        hours = np.array([(now - m.last_access) / 60.0 for m in self.memories])
        recency = RECENCY_DECAY ** np.maximum(hours, 0.0)
        importance = np.array([m.importance for m in self.memories], dtype=np.float64)
        relevance = (self._matrix[:n] @ self.embed(query)).astype(np.float64)
        wr, wi, wv = self.weights
        return wr * normalise(recency) + wi * normalise(importance) + wv * normalise(relevance)

    def retrieve(self, query: str, now: int, k: int, *, touch: bool = True) -> list[Memory]:
        """The ``k`` best memories for ``query``, best first; their last access becomes ``now``
        (retrieving a memory refreshes its recency, as in Park et al.)."""
        if not self.memories or k <= 0:
            return []
        scores = self.scores(query, now)
        # Stable tie-break on id keeps runs reproducible.
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        out = [self.memories[int(i)] for i in order]
        if touch:
            for m in out:
                m.last_access = now
        return out

    def about(self, subject: str, n: int) -> list[Memory]:
        """The ``n`` most recent memories about one actor or agent."""
        found = [m for m in reversed(self.memories) if m.subject == subject]
        return found[:n]
