"""Validators as adopters write them, and the fallback answer, through the official SDK types.

An existing code base's parse functions fail on a malformed answer with whatever their code
meets (``KeyError``, ``IndexError``, ``TypeError``, ``AttributeError``), not ``ValueError``:
each such answer must be invalid (resubmitted), never a raw exception after a paid call. When
every attempt is invalid, a ``fallback`` returns what that code would have returned, as the
endpoint's own response type, counted and never stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from client_support import make, opts
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import BaseModel

from llmcache import AsyncCachedLLM, CacheConfig, CacheOptions, CategoryPolicy, SemanticCache
from llmcache._validation import as_validator, check
from llmcache.errors import InvalidResponseError
from llmcache.recording import read_records
from llmcache.testing import AsyncFakeOpenAI, FakeOpenAI, HashEmbedder, scripted

MSGS = [{"role": "user", "content": "Rate how important this is: the tree is idle."}]


def rating_fields(text: str) -> int:
    """A parse function in the style of generative-agent code bases: a ``KeyError`` when the
    answer has no ``Rating:`` line."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return int(fields["Rating"])


def rating_split(text: str) -> str:
    """Another: an ``IndexError`` when the marker is missing."""
    return text.split("Rating: ")[1]


def rating_index(text: str) -> Any:
    return text["rating"]  # type: ignore[index]  # a TypeError on any text


def rating_attribute(text: str) -> Any:
    return text.rating  # type: ignore[attr-defined]  # an AttributeError on any text


VALIDATORS: list[tuple[Callable[[str], Any], str]] = [
    (rating_fields, "KeyError"),
    (rating_split, "IndexError"),
]


@pytest.mark.parametrize(("validator", "kind"), VALIDATORS)
def test_a_raising_validator_resubmits_then_succeeds(
    tmp_path: Path, validator: Callable[[str], Any], kind: str
) -> None:
    fake = FakeOpenAI(scripted(["I think it is fairly important.", "Rating: 7"]))
    client = make(tmp_path, fake)
    completion, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(validator=validator)
    )
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "Rating: 7"
    assert (info.outcome, info.attempts) == ("miss", 2)
    assert info.entry_id is not None  # the valid answer is stored
    client.close()
    records = read_records(tmp_path / "rec.jsonl", include_invalid=True)
    invalid = [r for r in records if r.kind == "invalid_attempt"]
    assert len(invalid) == 1 and invalid[0].error is not None and kind in invalid[0].error


@pytest.mark.parametrize(
    ("validator", "kind"),
    [*VALIDATORS, (rating_index, "TypeError"), (rating_attribute, "AttributeError")],
)
def test_check_names_the_exception_of_any_validator(
    validator: Callable[[str], Any], kind: str
) -> None:
    reason = check(as_validator(validator), "no rating here")
    assert reason is not None and reason.startswith(kind)


def test_an_interrupt_in_a_validator_is_not_an_invalid_answer() -> None:
    def interrupted(text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check(as_validator(interrupted), "Rating: 7")


def test_every_attempt_invalid_raises_with_the_last_response(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["first miss", "second miss"]))
    client = make(tmp_path, fake, max_attempts=2)
    with pytest.raises(InvalidResponseError) as raised:
        client.chat.completions.create(
            model="m", messages=MSGS, cache=opts(validator=rating_fields)
        )
    exc = raised.value
    assert exc.attempts == 2 and "KeyError" in exc.last_error
    assert isinstance(exc.last_response, ChatCompletion)
    assert exc.last_response.id == "chatcmpl-fake-2"
    assert exc.last_response.choices[0].message.content == "second miss"
    # Nothing stored: the same call, now answered validly, asks the LLM again.
    fake.responder = scripted(["Rating: 3"])
    _, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(validator=rating_fields)
    )
    assert info.outcome == "miss" and len(fake.calls) == 3
    assert client.cache.stats().total.fallbacks == 0


def test_the_fallback_answers_is_counted_and_never_stored(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["no rating", "still none"]))
    client = make(tmp_path, fake, max_attempts=2)
    options = opts(validator=rating_fields, fallback="Rating: 4")
    completion, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=options
    )
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == "Rating: 4"
    # Made from the last response paid for: its id, model and usage.
    assert completion.id == "chatcmpl-fake-2" and completion.model == "m"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert info.fallback and info.attempts == 2 and info.entry_id is None
    assert info.usage.total_tokens >= 2 * completion.usage.total_tokens  # both attempts spent
    assert client.cache.stats().total.fallbacks == 1
    # Never stored: the next identical call is a miss that asks the LLM again.
    second = client.chat.completions.create(model="m", messages=MSGS, cache=options)
    assert second.choices[0].message.content == "Rating: 4"
    assert len(fake.calls) == 4
    stats = client.cache.stats()
    assert stats.total.fallbacks == 2 and stats.total.hits == 0
    client.close()
    # The counter is persisted with the table's others.
    reopened = SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64))
    assert reopened.stats().total.fallbacks == 2
    reopened.close()
    lines = [r for r in read_records(tmp_path / "rec.jsonl") if r.kind == "call"]
    assert [r.valid for r in lines] == [False, False]


def test_a_category_sets_the_fallback(tmp_path: Path) -> None:
    policy = CategoryPolicy(validator=rating_split, fallback="Rating: 1")
    client = make(tmp_path, FakeOpenAI(lambda r: "nothing"), max_attempts=1)
    client = client.with_cache(categories={"importance": policy})
    completion, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts()
    )
    assert completion.choices[0].message.content == "Rating: 1" and info.fallback
    # The call's own fallback wins over its category's.
    completion = client.chat.completions.create(
        model="m", messages=MSGS, cache=opts(fallback="Rating: 9")
    )
    assert completion.choices[0].message.content == "Rating: 9"


def test_a_cached_answer_the_validator_raises_on_is_a_miss(tmp_path: Path) -> None:
    fake = FakeOpenAI(scripted(["no rating at all", "Rating: 5"]))
    client = make(tmp_path, fake)
    client.chat.completions.create(model="m", messages=MSGS, cache=opts())
    completion, info = client.chat.completions.create_with_info(
        model="m", messages=MSGS, cache=opts(validator=rating_fields)
    )
    assert info.outcome == "miss" and completion.choices[0].message.content == "Rating: 5"


class Rated(BaseModel):
    rating: int


def test_the_fallback_of_parse_and_of_the_other_endpoints(tmp_path: Path) -> None:
    # JSON the SDK parses (it raises on any other, as the real client does), which the
    # caller's parse function refuses.
    fake = FakeOpenAI(lambda r: '{"rating": 11}')
    client = make(tmp_path, fake, max_attempts=1)
    parsed, info = client.chat.completions.parse_with_info(
        model="m",
        messages=MSGS,
        response_format=Rated,
        cache=opts(validator=rating_fields, fallback="unknown"),
    )
    # A fallback that does not fit the type: the caller's text, nothing parsed.
    assert parsed.choices[0].message.content == "unknown" and info.fallback
    assert parsed.choices[0].message.parsed is None
    fitting = client.chat.completions.parse(
        model="m",
        messages=MSGS,
        response_format=Rated,
        cache=opts(validator=rating_fields, fallback='{"rating": 1}'),
    )
    assert fitting.choices[0].message.parsed == Rated(rating=1)
    response, info = client.responses.create_with_info(
        model="m", input="Rate it", cache=opts(validator=rating_fields, fallback="Rating: 2")
    )
    assert isinstance(response, Response) and response.output_text == "Rating: 2"
    assert info.fallback and response.id.startswith("resp_fake_")
    completion, info = client.completions.create_with_info(
        model="m", prompt="Rate it", cache=opts(validator=rating_fields, fallback="Rating: 3")
    )
    assert isinstance(completion, Completion) and completion.choices[0].text == "Rating: 3"
    assert info.fallback and completion.id.startswith("cmpl-fake-")
    assert client.cache.stats().total.fallbacks == 4


def test_a_streamed_invalid_answer_reaches_the_caller_and_is_not_stored(tmp_path: Path) -> None:
    # A stream's chunks reach the caller as they arrive: the paid answer is not taken back for
    # a fallback (the streamed path makes one attempt), and it is never stored.
    fake = FakeOpenAI(lambda r: "no rating here")
    client = make(tmp_path, fake)
    options = opts(validator=rating_fields, fallback="Rating: 4")
    stream = client.chat.completions.create(model="m", messages=MSGS, cache=options, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "no rating here"
    info = stream.cache_info
    assert info is not None and info.outcome == "miss" and not info.fallback
    assert info.entry_id is None
    again = client.chat.completions.create(model="m", messages=MSGS, cache=options, stream=True)
    list(again)
    assert again.cache_info.outcome == "miss" and len(fake.calls) == 2


def test_async_validators_and_fallback(tmp_path: Path) -> None:
    async def main() -> tuple[Any, ...]:
        fake = AsyncFakeOpenAI(scripted(["oops", "Rating: 6", "bad", "worse"]))
        cache = SemanticCache(
            tmp_path / "c", embedder=HashEmbedder(dim=64), config=CacheConfig(max_attempts=2)
        )
        client = AsyncCachedLLM(fake, cache=cache)
        good, first = await client.chat.completions.create_with_info(
            model="m", messages=MSGS, cache=opts(validator=rating_fields)
        )
        other = [{"role": "user", "content": "Rate: the bench is wet."}]
        options = CacheOptions(
            category="importance",
            agent="Liam",
            keywords=["bench wet"],
            validator=rating_split,
            fallback="Rating: 1",
        )
        fell, second = await client.chat.completions.create_with_info(
            model="m", messages=other, cache=options
        )
        fake.responder = scripted(["bad", "worse"])
        with pytest.raises(InvalidResponseError) as raised:
            await client.chat.completions.create(
                model="m", messages=other, cache=options.model_copy(update={"fallback": None})
            )
        fallbacks = cache.stats().total.fallbacks
        client.close()
        return good, first, fell, second, raised.value, fallbacks, len(fake.calls)

    good, first, fell, second, exc, fallbacks, calls = asyncio.run(main())
    assert good.choices[0].message.content == "Rating: 6" and first.attempts == 2
    assert fell.choices[0].message.content == "Rating: 1" and second.fallback
    assert second.entry_id is None and fallbacks == 1
    # The fallback was not stored: the third call asked again, and raised with what it got.
    assert isinstance(exc.last_response, ChatCompletion) and calls == 6
