"""Configuration files: what `CacheConfig.to_file` writes, `from_file` reads back equal, and the
client and the proxy accept by path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmcache import CacheConfig, CachedLLM, CacheOptions, CategoryPolicy
from llmcache.errors import ConfigurationError
from llmcache.proxy._cli import _parser, _settings
from llmcache.testing import FakeOpenAI, HashEmbedder
from llmcache.verification import Within, equivalence_named, same_answer


def _tuned() -> CacheConfig:
    return CacheConfig(
        threshold=0.93,
        wrong_hit_budget=0.05,
        categories={
            "importance": CategoryPolicy(threshold=0.95, embed="full", equivalence=Within(1)),
            "plan": CategoryPolicy(equivalence=same_answer, twin_rate=0.1),
            "chat": CategoryPolicy(bypass=True),
        },
    )


def test_a_tuned_file_round_trips_with_its_figures_beside_it(tmp_path: Path) -> None:
    path = _tuned().to_file(tmp_path / "tuned.json", tuning={"importance": {"cut": 0.5}})
    assert CacheConfig.from_file(path) == _tuned()
    written = json.loads(path.read_text())
    assert written["categories"]["importance"]["equivalence"] == "within:1"
    assert written["tuning"] == {"importance": {"cut": 0.5}}


def test_equivalences_by_name() -> None:
    within = equivalence_named("within:1")
    assert within("7", '{"rating": 8}') and not within("7", "9")
    assert not within("7", "seven")  # no number: compared as texts
    assert equivalence_named("exact") is same_answer
    with pytest.raises(ConfigurationError, match="within:N"):
        equivalence_named("roughly")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"categories": {"x": {"modifier": "read"}}}', "modifier"),
        ('{"verifier": "llm"}', "verifier"),
        ('{"treshold": 0.9}', "threshold"),
        ('{"threshold": 7}', "threshold"),
        ("{not json", "cannot read"),
        ('{"categories": {"x": {"equivalence": "close"}}}', "close"),
    ],
)
def test_a_file_that_cannot_be_a_configuration_is_refused(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=why):
        CacheConfig.from_file(path)


def test_code_cannot_be_written_to_a_file(tmp_path: Path) -> None:
    config = CacheConfig(categories={"x": CategoryPolicy(equivalence=lambda a, b: a == b)})
    with pytest.raises(ConfigurationError, match="no name"):
        config.to_file(tmp_path / "x.json")
    with pytest.raises(ConfigurationError, match="validator"):
        CacheConfig(categories={"x": CategoryPolicy(validator=dict)}).to_file(tmp_path / "y.json")


def test_the_client_takes_a_tuned_file_by_path(tmp_path: Path) -> None:
    path = _tuned().to_file(tmp_path / "tuned.json")
    with CachedLLM(
        FakeOpenAI(lambda request: "5"),
        tmp_path / "cache",
        embedder=HashEmbedder(),
        config=str(path),
    ) as client:
        assert client.cache.config == _tuned()
        ask = {"model": "m", "messages": [{"role": "user", "content": "rate: a walk"}]}
        # The file's bypass is in force: the chat category is never served from the cache.
        for _ in range(2):
            _, info = client.chat.completions.create_with_info(
                **ask, cache=CacheOptions(category="chat", keywords=["a walk"])
            )
            assert info.outcome == "bypass"


def test_the_proxy_takes_a_tuned_file_and_its_options_override_it(tmp_path: Path) -> None:
    path = _tuned().to_file(tmp_path / "tuned.json")
    settings = _settings(_parser().parse_args(["--no-auth", "--config", str(path)]))
    assert settings.config == _tuned()
    settings = _settings(
        _parser().parse_args(["--no-auth", "--config", str(path), "--threshold", "0.97"])
    )
    assert settings.config == _tuned().updated(threshold=0.97)
    bad = tmp_path / "bad.json"
    bad.write_text('{"categories": {"x": {"verifier": "v"}}}')
    with pytest.raises(ConfigurationError, match="verifier"):
        _settings(_parser().parse_args(["--no-auth", "--config", str(bad)]))
