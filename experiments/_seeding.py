"""A client that gives every request of a study step a sampling seed drawn from the profile's.

The later steps ask the LLM for revisions (the ``revise`` modifier), judge rankings and second
answers. A server that is sent no ``seed`` draws one of its own per request, so the same
commit's report moved by a point or two between runs; llama.cpp's server (and OpenAI's, as a
best effort) samples the same answer for the same request at the same seed. The seed is drawn
as the town draws its own (:class:`agent_core.llm.TownLLM`): from the step's seed, the request,
and how often this step has sent that request before -- so a resubmission is asked at a new
seed, and the step's answers do not depend on which other steps ran in the same process.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from typing import Any

__all__ = ["SeededClient", "request_seed"]


def request_seed(seed: str, request: dict[str, Any], occurrence: int) -> int:
    """The sampling seed of the ``occurrence``-th sending (0-based) of ``request`` under the
    step seed ``seed``: in ``[0, 2**31)``, the range servers accept."""
    return _seed_of(seed, _digest(request), occurrence)


def _seed_of(seed: str, digest: str, occurrence: int) -> int:
    mixed = hashlib.blake2b(f"{seed}:{digest}:{occurrence}".encode(), digest_size=4)
    return int.from_bytes(mixed.digest(), "big") % 2**31


def _digest(request: dict[str, Any]) -> str:
    text = json.dumps(request, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class _Completions:
    def __init__(self, owner: SeededClient) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        return self._owner.create(kwargs)


class _Chat:
    def __init__(self, owner: SeededClient) -> None:
        self.completions = _Completions(owner)


class SeededClient:
    """``client`` whose ``chat.completions.create`` sends every request with a ``seed`` drawn
    by :func:`request_seed` from ``seed`` (a request that carries a seed of its own keeps it:
    the budget step seeds its second answers itself). Every other attribute is the client's.
    ``seeds`` lists the seeds drawn, in order."""

    def __init__(self, client: Any, seed: str) -> None:
        self._client = client
        self._seed = seed
        self._sent: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.seeds: list[int] = []
        self.chat = _Chat(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create(self, kwargs: dict[str, Any]) -> Any:
        if kwargs.get("seed") is None:
            digest = _digest(kwargs)
            with self._lock:
                occurrence = self._sent[digest]
                self._sent[digest] += 1
                drawn = _seed_of(self._seed, digest, occurrence)
                self.seeds.append(drawn)
            kwargs = {**kwargs, "seed": drawn}
        return self._client.chat.completions.create(**kwargs)
