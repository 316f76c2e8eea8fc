"""Recorded runs as the experiments see them: kept prompts, their texts and their embeddings.

A run is the JSONL dataset ``python -m agent_core run`` (or ``experiments collect``) records
through llmcache's ``Recorder``. As in the study, resubmitted answers (``invalid_attempt``
lines) and the dialogue categories (never cached) are dropped; what remains is one
:class:`Prompt` per logical call, with both embedding descriptions computed the way the cache
computes them (``llmcache._filing.embedding_text``), so an experiment and a live cache agree.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from agent_core.call import TownCall
from agent_core.templates import GROUPS, template
from llmcache import CacheOptions, EmbedMode
from llmcache.embedders import Embedder, embedding_text
from llmcache.recording import RecordedCall, read_records

__all__ = [
    "ALL",
    "DIALOGUE_GROUP",
    "MODES",
    "EmbeddingStore",
    "Prompt",
    "cosine_of",
    "kept_groups",
    "load_run",
    "messages_key",
    "tables",
]

DIALOGUE_GROUP = "dialogue"
#: The name of every group together, in per-group results.
ALL = "all"
MODES: tuple[Literal["full", "keyword"], ...] = ("full", "keyword")


def messages_key(messages: Any) -> str:
    """A request's messages as sorted-key JSON: what makes two prompts the same query (the
    cost replay's lookup key; the repeated queries the quality step compares)."""
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)


class Prompt(BaseModel):
    """One kept prompt of a run: what was asked, what was answered, when, by whom."""

    run: int
    index: int  # position among the run's kept prompts (time order)
    category: str
    group: str
    agent: str
    modifier: str
    keywords: list[str]
    options: list[str] | None
    messages: list[dict[str, Any]]
    response: str
    sim_minute: int
    elapsed_minutes: int  # since the run's first prompt's day began planning
    observed_actors: int
    metadata: dict[str, Any]
    model: str
    escalated: bool
    attempts: int
    prompt_tokens: int  # as the server reported them
    completion_tokens: int
    cost_usd: float  # what the call cost at the ledger's prices (resubmissions included)

    @property
    def key(self) -> tuple[str, str]:
        """The cache table: category x agent (request parameters are the same within a run)."""
        return (self.category, self.agent)

    @property
    def prompt_text(self) -> str:
        """The user message: the prompt as the agent asked it (what a judge reads)."""
        users = [str(m.get("content", "")) for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def prompt_chars(self) -> int:
        return sum(len(str(m.get("content", ""))) for m in self.messages)

    def call(self) -> TownCall:
        """The town's typed call this prompt was recorded for (what rebuilds its request)."""
        return TownCall.from_record({"metadata": self.metadata})

    def description(self, mode: str) -> str:
        """The text the cache embeds this prompt by, in ``mode`` ("full" or "keyword")."""
        opts = CacheOptions(category=self.category, agent=self.agent, keywords=self.keywords)
        return embedding_text(EmbedMode(mode), opts, self.messages)


def _kept(rec: RecordedCall) -> bool:
    if rec.kind != "call" or rec.response is None or rec.resubmission:
        return False
    try:
        return template(rec.category).group != DIALOGUE_GROUP
    except KeyError:
        return False


def load_run(path: str | Path, run: int) -> list[Prompt]:
    """The kept prompts of one recorded run, in the order they were asked."""
    records = [r for r in read_records(path) if _kept(r)]
    start = None
    out: list[Prompt] = []
    for rec in records:
        meta = rec.metadata
        minute = int(meta.get("sim_minute", 0))
        if start is None:
            start = minute
        t = template(rec.category)
        assert rec.response is not None
        out.append(
            Prompt(
                run=run,
                index=len(out),
                category=rec.category,
                group=t.group,
                agent=rec.agent,
                modifier=t.modifier or "bypass",
                keywords=list(rec.keywords or [rec.category]),
                options=rec.options,
                messages=rec.messages,
                response=rec.response,
                sim_minute=minute,
                elapsed_minutes=minute - start,
                observed_actors=int(meta.get("observed_actors", 0)),
                metadata=meta,
                model=rec.model,
                escalated=rec.escalated,
                attempts=rec.attempts,
                prompt_tokens=rec.prompt_tokens,
                completion_tokens=rec.completion_tokens,
                cost_usd=rec.cost_usd,
            )
        )
    return out


def kept_groups() -> list[str]:
    """The prompt groups the study evaluated: every group but dialogue, in the study's order."""
    return [g for g in GROUPS if g != DIALOGUE_GROUP]


def tables(prompts: Iterable[Prompt]) -> dict[tuple[str, str], list[Prompt]]:
    """Prompts by cache table (category x agent), each table in time order."""
    out: dict[tuple[str, str], list[Prompt]] = defaultdict(list)
    for p in prompts:
        out[p.key].append(p)
    return dict(out)


class EmbeddingStore:
    """Embeddings of descriptions, memoised on disk by embedder and text.

    Embedding a run's full prompts is the slowest offline step; storing the vectors by the
    SHA-256 of ``embedder id + text`` lets every experiment (and a re-run) reuse them.
    """

    def __init__(self, directory: str | Path, embedder: Embedder) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self._path = self.directory / f"{_slug(embedder.model_id)}.npz"
        self._vectors: dict[str, NDArray[np.float32]] = {}
        if self._path.exists():
            with np.load(self._path) as data:
                self._vectors = {k: np.asarray(data[k], dtype=np.float32) for k in data.files}
        self._dirty = False

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.embedder.model_id}\0{text}".encode()).hexdigest()[:32]

    def embed(self, texts: Sequence[str], *, batch: int = 64) -> NDArray[np.float32]:
        """An ``(n, dim)`` matrix of L2-normalised rows, one per text."""
        keys = [self._key(t) for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors})
        by_key = dict(zip(keys, texts, strict=True))
        for i in range(0, len(todo), batch):
            chunk = todo[i : i + batch]
            vectors = self.embedder.embed([by_key[k] for k in chunk])
            for k, v in zip(chunk, vectors, strict=True):
                self._vectors[k] = np.asarray(v, dtype=np.float32)
            self._dirty = True
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self._vectors[k] for k in keys])

    def save(self) -> None:
        if not self._dirty:
            return
        tmp = self._path.with_name(self._path.stem + ".tmp.npz")
        np.savez(tmp, **self._vectors)  # type: ignore[arg-type]
        tmp.replace(self._path)
        self._dirty = False


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def cosine_of(store: EmbeddingStore | Embedder) -> Callable[[str, str], float]:
    """Cosine of two texts by ``store``'s unit vectors: the similarity the text tolerances
    compare with (the quality step's and the replay study's)."""

    def similarity(a: str, b: str) -> float:
        va, vb = store.embed([a, b])
        return float(np.clip(np.dot(va, vb), -1.0, 1.0))

    return similarity
