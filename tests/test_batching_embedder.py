"""BatchingEmbedder: concurrent callers' texts go to the model together; each gets its own rows."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from llmcache.embedders import BatchingEmbedder, default_embedder
from llmcache.errors import ConfigurationError, EmbedderError
from llmcache.testing import HashEmbedder


class GatedEmbedder:
    """A hash embedder whose first call waits until the test opens the gate, so that the other
    callers are sure to queue meanwhile; it records every batch it is given."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.inner = HashEmbedder()
        self.gate = threading.Event()
        self.batches: list[list[str]] = []
        self.fail_on = fail_on

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not self.batches:
            assert self.gate.wait(10)
        self.batches.append(list(texts))
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)


def _ask_together(
    batching: BatchingEmbedder, gated: GatedEmbedder, texts: list[list[str]]
) -> list[NDArray[np.float32] | BaseException]:
    results: list[NDArray[np.float32] | BaseException] = [np.empty(0)] * len(texts)

    def ask(i: int) -> None:
        try:
            results[i] = batching.embed(texts[i])
        except BaseException as exc:  # handed to the test to inspect
            results[i] = exc

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    while not batching._busy:  # the first caller holds the model
        threading.Event().wait(0.001)
    rest = [threading.Thread(target=ask, args=(i,)) for i in range(1, len(texts))]
    for queued, t in enumerate(rest, start=1):
        # One at a time, each queued before the next starts: the queue's order is the texts'
        # order (threads started together may queue in any order on a loaded machine).
        t.start()
        while len(batching._queue) < queued:
            threading.Event().wait(0.001)
    gated.gate.set()
    for t in [first, *rest]:
        t.join(10)
    return results


def test_eight_callers_at_once_pay_two_model_calls() -> None:
    gated = GatedEmbedder()
    batching = BatchingEmbedder(gated)
    texts = [[f"agent {i} sees the bench"] for i in range(7)] + [["two texts", "at once"]]
    results = _ask_together(batching, gated, texts)
    assert len(gated.batches) == 2  # the first alone, the seven who queued behind it together
    assert gated.batches[0] == texts[0]
    assert sorted(gated.batches[1]) == sorted(t for ts in texts[1:] for t in ts)
    assert (batching.calls, batching.texts) == (2, 9)
    for asked, got in zip(texts, results, strict=True):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, HashEmbedder().embed(asked))  # own rows, in order


def test_batches_respect_max_batch() -> None:
    gated = GatedEmbedder()
    batching = BatchingEmbedder(gated, max_batch=3)
    texts = [[f"text {i}", f"more {i}"] for i in range(5)]
    results = _ask_together(batching, gated, texts)
    assert all(len(b) <= 3 for b in gated.batches)
    assert sum(len(b) for b in gated.batches) == 10
    assert all(isinstance(r, np.ndarray) and r.shape == (2, gated.dim) for r in results)


def test_a_failed_batch_fails_its_callers_and_not_the_next() -> None:
    gated = GatedEmbedder(fail_on="poison")
    batching = BatchingEmbedder(gated, max_batch=2)
    texts = [["alone"], ["poison"], ["sharing the bad batch"], ["later"]]
    results = _ask_together(batching, gated, texts)
    assert isinstance(results[0], np.ndarray)
    # "poison" and the caller batched with it fail; the batch's first caller (whose turn it
    # was) gets the model's own exception, whichever of the waiting threads ran the batch.
    assert isinstance(results[1], RuntimeError)
    assert isinstance(results[2], EmbedderError) and "shared batch" in str(results[2])
    assert isinstance(results[3], np.ndarray)  # the next batch runs normally


def test_a_lone_caller_embeds_at_once_and_empty_input_costs_nothing() -> None:
    inner = HashEmbedder()
    batching = BatchingEmbedder(inner)
    np.testing.assert_array_equal(batching.embed(["a", "b"]), inner.embed(["a", "b"]))
    assert batching.embed([]).shape == (0, inner.dim)
    assert (batching.calls, batching.model_id, batching.dim) == (1, inner.model_id, inner.dim)
    with pytest.raises(ConfigurationError):
        batching.embed("not a list")
    with pytest.raises(ConfigurationError):
        BatchingEmbedder(inner, max_batch=0)


def test_the_default_embedder_batches_behind_its_memo() -> None:
    embedder = default_embedder()
    assert isinstance(getattr(embedder, "inner", None), BatchingEmbedder)
