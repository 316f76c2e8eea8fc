"""The faults that apply to the Postgres backend: damaged rows (a body edited, a vector changed,
a completion that no longer validates), odd inputs and tool-call answers through a PgBackend.

SIGKILL and concurrent writers against Postgres are in test_crash_and_concurrency.py. Byte-level
damage does not apply: the server refuses text that is not UTF-8, and index files are its own.
"""

from __future__ import annotations

from typing import Any

import pytest
from fault_tools import ask, open_client, opts, words

from llmcache._ledger import stats_key

psycopg = pytest.importorskip("psycopg", reason="the [pg] extra is not installed")


def _sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def _filled(pg_backends: Any, n: int = 3) -> tuple[Any, list[tuple[list[str], str]], str]:
    """A client on a fresh schema with ``n`` answers stored; (client, made, schema)."""
    import random

    rng = random.Random(5)
    client, _ = open_client(pg_backends.make())
    made = []
    for _ in range(n):
        keywords = words(rng)
        content, info = ask(client, keywords)
        assert info.outcome == "miss" and content
        made.append((keywords, content))
    return client, made, client.cache.backend.schema


def _first_id(dsn: str, schema: str) -> int:
    ((entry_id,),) = _sql(dsn, f'SELECT min(id) FROM "{schema}".entries')
    return int(entry_id)


def test_pg_an_answer_edited_in_its_body_is_a_counted_miss(pg_backends: Any) -> None:
    client, made, schema = _filled(pg_backends)
    first = _first_id(pg_backends.dsn, schema)
    _sql(
        pg_backends.dsn,
        f'UPDATE "{schema}".bodies SET body = replace(body, %s, %s) WHERE id = %s',
        "answer to",
        "planted",
        first,
    )
    content, info = ask(client, made[0][0])
    assert content == made[0][1]  # asked again: the same fake answer, not the planted one
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1)
    assert client.cache.stats().total.corrupt == 1
    client.close()


def test_pg_a_changed_vector_is_a_counted_miss(pg_backends: Any) -> None:
    client, made, schema = _filled(pg_backends, 2)
    first = _first_id(pg_backends.dsn, schema)
    # The first entry's vector replaced by the second's: its body's checksum no longer holds.
    _sql(
        pg_backends.dsn,
        f'UPDATE "{schema}".entries SET embedding = '
        f'(SELECT embedding FROM "{schema}".entries WHERE id = %s) WHERE id = %s',
        first + 1,
        first,
    )
    _, info = ask(client, made[1][0])
    assert info.outcome == "hit"  # the sound entry, at cosine 1
    assert info.corrupt_dropped == 1  # the damaged neighbour met on the way, and dropped
    pkey = client.cache.partitions()[0].key
    assert client.cache.backend.count(pkey) == 1
    client.close()


def test_pg_a_completion_that_no_longer_validates_is_a_counted_miss(pg_backends: Any) -> None:
    client, made, schema = _filled(pg_backends, 1)
    _sql(
        pg_backends.dsn,
        f"UPDATE \"{schema}\".bodies SET body = jsonb_set(body::jsonb #- '{{checksum}}',"
        " '{completion,choices,0,message,role}', '\"robot\"')::text",
    )
    content, info = ask(client, made[0][0])
    assert (info.outcome, info.corrupt_dropped) == ("miss", 1) and content
    assert ask(client, made[0][0])[1].outcome == "hit"
    client.close()


def test_pg_entries_without_a_checksum_still_load(pg_backends: Any) -> None:
    client, made, schema = _filled(pg_backends, 2)
    _sql(pg_backends.dsn, f"UPDATE \"{schema}\".bodies SET body = (body::jsonb - 'checksum')::text")
    for keywords, answer in made:
        content, info = ask(client, keywords)
        assert (info.outcome, content) == ("hit", answer)
    client.close()


def test_pg_iterate_drops_and_counts_each_damaged_entry_once(pg_backends: Any) -> None:
    client, _, schema = _filled(pg_backends, 4)
    first = _first_id(pg_backends.dsn, schema)
    _sql(pg_backends.dsn, f"UPDATE \"{schema}\".bodies SET body = '{{broken' WHERE id = %s", first)
    _sql(pg_backends.dsn, f'DELETE FROM "{schema}".bodies WHERE id = %s', first + 1)
    other = pg_backends.make(schema)  # another process on the same cache
    (partition,) = client.cache.partitions()
    assert len(list(client.cache.backend.iterate(partition.key))) == 2
    assert len(list(other.iterate(partition.key))) == 2
    assert other.count(partition.key) == 2  # evicted: the count is right again
    assert other.read_stats()[stats_key(partition)]["corrupt"] == 2  # once each
    client.close()


@pytest.mark.parametrize(
    "text",
    ["before\x00after", "lorem ipsum " * 8_400, "🌳 😴 👨‍👩‍👧", "העץ בפארק", "tab\tand\x1b"],
    ids=["nul", "100k-chars", "emoji", "right-to-left", "control-chars"],
)
def test_pg_odd_text_round_trips(pg_backends: Any, text: str) -> None:
    client, fake = open_client(pg_backends.make())
    first, miss = ask(client, [text, "x"])
    again, hit = ask(client, [text, "x"])
    assert (miss.outcome, hit.outcome, again) == ("miss", "hit", first) and len(fake.calls) == 1
    assert not miss.store_failed
    client.close()


def test_pg_lone_surrogates_get_their_answer_counted_as_not_stored(pg_backends: Any) -> None:
    client, _ = open_client(pg_backends.make())
    content, info = ask(client, ["tree \udc80 idle"])
    assert content and info.store_failed
    assert client.cache.stats().total.store_failures == 1
    client.close()


def test_pg_tool_call_answers_are_cached(pg_backends: Any) -> None:
    from llmcache.testing import FakeOpenAI

    call = {"id": "c1", "type": "function", "function": {"name": "rate", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}
    client, fake = open_client(pg_backends.make(), FakeOpenAI(lambda request: body))
    for outcome in ("miss", "hit"):
        reply, info = client.chat.completions.create_with_info(
            model="m",
            messages=[{"role": "user", "content": "rate it"}],
            tools=[{"type": "function", "function": {"name": "rate", "parameters": {}}}],
            cache=opts(["rate", "it"]),
        )
        assert info.outcome == outcome
        assert reply.choices[0].message.tool_calls[0].id == "c1"
    assert len(fake.calls) == 1
    client.close()
