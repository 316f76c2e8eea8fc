"""Offline token estimates: o200k_base through bpe-openai, chars/4 when it is unavailable."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from llmcache import _tokens
from llmcache._tokens import count_message_tokens, count_tokens


@pytest.fixture
def without_bpe_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``import bpe_openai`` fail, and forget the loaded encoder before and after."""
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    _tokens._encoder.cache_clear()
    yield
    monkeypatch.undo()
    _tokens._encoder.cache_clear()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # o200k_base ids of these strings are [24912, 2375], [13225, 11, 2375, 0], and
        # [976, 4853, 19705, 68347, 65613, 1072, 290, 29082, 6446, 13].
        ("hello world", 2),
        ("Hello, world!", 4),
        ("The quick brown fox jumps over the lazy dog.", 10),
        ("", 0),
        # A special token's spelling inside user text is plain text, never an error.
        ("<|endoftext|>", 7),
    ],
)
def test_count_tokens_o200k(text: str, expected: int) -> None:
    assert count_tokens(text) == (expected, "o200k_base")


def test_long_text_is_counted_in_chunks_without_error() -> None:
    text = "word " * 30_000  # 150k characters: three chunks
    encoder = _tokens._encoder()
    assert encoder is not None
    assert count_tokens(text) == (len(encoder.encode_ordinary(text)), "o200k_base")
    # Past bpe-openai's own 1M-character refusal; no whitespace to cut at.
    n, source = count_tokens("a" * 1_200_000)
    assert source == "o200k_base"
    assert 1_200_000 / 20 < n < 1_200_000


@pytest.mark.usefixtures("without_bpe_openai")
def test_falls_back_to_four_characters_per_token() -> None:
    assert count_tokens("abcdefgh") == (2, "chars/4")
    assert count_tokens("abcdefghi") == (3, "chars/4")  # rounded up
    assert count_tokens("") == (0, "chars/4")
    tokens, source = count_message_tokens([{"role": "user", "content": "abcdefgh"}])
    # 3 per message + "user" (1) + content (2) + 3 reply priming
    assert (tokens, source) == (9, "chars/4")


def test_message_tokens_follow_openais_recipe() -> None:
    # 3 per message + role "user" (1 token) + "hello world" (2) + 3 to prime the reply.
    assert count_message_tokens([{"role": "user", "content": "hello world"}]) == (9, "o200k_base")
    assert count_message_tokens([]) == (0, "o200k_base")
    two = [
        {"role": "system", "content": "hello world"},
        {"role": "user", "content": "hello world", "name": "Liam"},
    ]
    # "system" is 1 token; the second message adds its name "Liam" (2 tokens) plus 1.
    assert count_message_tokens(two)[0] == (3 + 1 + 2) + (3 + 1 + 2 + 2 + 1) + 3


def test_message_tokens_read_part_lists_and_tool_calls() -> None:
    parts = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hello world"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        }
    ]
    assert count_message_tokens(parts)[0] == 9  # the image part is not counted
    with_tools = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "cafe"}'},
                }
            ],
        }
    ]
    tokens, _ = count_message_tokens(with_tools)
    base = count_message_tokens([{"role": "assistant", "content": None}])[0]
    assert tokens - base == count_tokens('lookup\n{"q": "cafe"}')[0] > 3


def test_the_encoder_is_loaded_once() -> None:
    assert _tokens._encoder() is _tokens._encoder()
