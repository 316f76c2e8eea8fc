"""How a request becomes a table (partition) and an embedding text."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import ConfigurationError
from ._types import TEMPLATE_MARK, CacheOptions, EmbedMode, Partition, canonical_json

__all__ = ["embedding_text", "keywords_text", "messages_text", "output_params", "partition_for"]

# Request parameters that do not change what the model answers. Everything else (model,
# temperature, response_format, tools, seed, max_tokens, extra_body …) splits the tables, so a
# cached answer is never served to a request that would have been answered differently.
# Secrets never reach here: api_key and base_url live on the client, not in ``create``'s kwargs.
_NOT_OUTPUT_AFFECTING = frozenset(
    {
        "messages",
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "timeout",
        "extra_headers",
        "extra_query",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
    }
)


def _is_sentinel(value: Any) -> bool:
    # openai's NOT_GIVEN / omit markers mean "not passed": they must not change the key.
    return type(value).__name__ in {"NotGiven", "Omit"}


# Server hints inside ``extra_body`` that steer scheduling, not the answer (llama.cpp's slot
# pinning and prompt-prefix cache).
_NOT_OUTPUT_AFFECTING_EXTRA_BODY = frozenset({"id_slot", "cache_prompt"})


def output_params(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The output-affecting request parameters, JSON-safe."""
    params = {
        k: v for k, v in kwargs.items() if k not in _NOT_OUTPUT_AFFECTING and not _is_sentinel(v)
    }
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        kept = {k: v for k, v in extra.items() if k not in _NOT_OUTPUT_AFFECTING_EXTRA_BODY}
        if kept:
            params["extra_body"] = kept
        else:
            del params["extra_body"]
    return params


def partition_for(options: CacheOptions, kwargs: Mapping[str, Any]) -> Partition:
    params = output_params(kwargs)
    if options.template is not None:
        # Keyed by the template's text (its digest), not its name: two templates that share a
        # name never share a table, and a renamed template keeps its tables.
        keyed = canonical_json({"template": options.template, "params": params})
        digest = TEMPLATE_MARK + hashlib.sha256(keyed.encode()).hexdigest()
    else:
        digest = hashlib.sha256(canonical_json(params).encode()).hexdigest()
    return Partition(
        category=options.category,
        agent=options.agent,
        params_hash=digest,
        model=str(params.get("model", "")),
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                parts.append(canonical_json(part))
        return "\n".join(parts)
    return canonical_json(content)


def messages_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """A canonical text of *all* messages (system, user, assistant, tool), one block each."""
    blocks = []
    for m in messages:
        text = f"{m.get('role', 'user')}: {_content_text(m.get('content'))}"
        extra = {k: v for k, v in m.items() if k not in ("role", "content")}
        if extra:
            text += "\n" + canonical_json(extra)
        blocks.append(text)
    return "\n\n".join(blocks)


def _valid_unicode(text: str) -> str:
    """``text`` with lone surrogates written out as ``\\udXXX`` escapes.

    A lone surrogate (from a badly decoded file, say) is not Unicode text: tokenizers refuse it
    and it cannot be written as UTF-8. Escaping keeps two different ones apart, so they never
    embed as the same text.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def embedding_text(
    mode: EmbedMode, options: CacheOptions, messages: Iterable[Mapping[str, Any]]
) -> str:
    """The text a prompt is embedded by: keywords joined by single spaces, or all messages."""
    if mode is EmbedMode.KEYWORD:
        # Blank keywords are no keywords: every blank-keyword prompt of a category would embed
        # as the same empty text and be served one another's answers at cosine 1.0.
        if not options.keywords or not any(k.strip() for k in options.keywords):
            given = (
                "no keywords"
                if not options.keywords
                else f"only blank keywords {list(options.keywords)!r}"
            )
            raise ConfigurationError(
                f"category {options.category!r} is cached in keyword mode but the call gave "
                f"{given}: pass CacheOptions(keywords=[...]) with the template's slot values, "
                "or use embed=EmbedMode.FULL for this category"
            )
        return keywords_text(options.keywords)
    return _valid_unicode(messages_text(messages))


def keywords_text(keywords: Iterable[str]) -> str:
    """Keywords as one embedding text: each stripped, joined by single spaces."""
    return _valid_unicode(" ".join(k.strip() for k in keywords))
