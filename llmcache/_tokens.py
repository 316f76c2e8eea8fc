"""Token estimates for when a server reports no usage.

The count comes from OpenAI's ``o200k_base`` encoding (gpt-4o, gpt-4o-mini and later) through
the ``bpe-openai`` package, which ships the BPE ranks inside its wheel; ``tiktoken`` would
download them at run time. When ``bpe-openai`` cannot be loaded, the count falls back to the
thesis's rule of 4 characters per token. Every function returns the count together with the
name of the method used, so records can say which estimate they hold.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CHARS_SOURCE",
    "O200K_SOURCE",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "count_message_tokens",
    "count_tokens",
]

logger = logging.getLogger(__name__)

O200K_SOURCE = "o200k_base"
CHARS_SOURCE = "chars/4"

#: Tokens the chat format adds around every message (``<|start|>role ... <|end|>``), as in
#: OpenAI's published counting recipe for the gpt-4o family.
TOKENS_PER_MESSAGE = 3
#: Tokens that prime the reply (``<|start|>assistant<|message|>``), added once per request.
REPLY_PRIMING_TOKENS = 3

# bpe-openai refuses more than 200k tokens per call and 1M characters; a chunk of 50k characters
# is at most 200k UTF-8 bytes and so at most 200k tokens (each token is at least one byte).
_CHUNK_CHARS = 50_000


@functools.cache
def _encoder() -> Any | None:
    """The o200k_base encoding, loaded once (about 1 s); ``None`` when it is unavailable."""
    try:
        # bpe-openai's loader uses deprecated importlib.resources calls; under ``-W error`` that
        # warning would otherwise turn into a silent fall-back to chars/4.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            return bpe_openai.get_encoding(O200K_SOURCE)
    except Exception as exc:  # ImportError, or a broken install whose data files are missing
        logger.warning(
            "bpe-openai unavailable (%s); token counts fall back to 4 characters per token", exc
        )
        return None


def _chunks(text: str) -> Iterable[str]:
    start = 0
    while len(text) - start > _CHUNK_CHARS:
        end = start + _CHUNK_CHARS
        # Cut at whitespace where possible, so no word is split into two half-words that
        # would each cost extra tokens.
        cut = max(text.rfind(" ", start + _CHUNK_CHARS // 2, end), text.rfind("\n", start, end))
        if cut <= start:
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


def count_tokens(text: str) -> tuple[int, str]:
    """``(tokens, source)`` for one text: source ``"o200k_base"`` or ``"chars/4"``.

    Special-token spellings such as ``<|endoftext|>`` are counted as the plain text they are.

    >>> count_tokens("hello world")
    (2, 'o200k_base')
    """
    if not text:
        enc = _encoder()
        return 0, (O200K_SOURCE if enc is not None else CHARS_SOURCE)
    enc = _encoder()
    if enc is None:
        # Rounded up, so any non-empty text costs at least one token.
        return (len(text) + 3) // 4, CHARS_SOURCE
    return sum(len(enc.encode_ordinary(part)) for part in _chunks(text)), O200K_SOURCE


def _content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a part list.

    Image and audio parts are skipped: their cost depends on the model's own rules.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return str(content)


def _tool_call_text(message: Mapping[str, Any]) -> str:
    texts = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            texts.append(str(function.get("name", "")))
            texts.append(str(function.get("arguments", "")))
    return "\n".join(texts)


def count_message_tokens(messages: Iterable[Mapping[str, Any]]) -> tuple[int, str]:
    """``(tokens, source)`` for the prompt of a chat request.

    Follows OpenAI's counting recipe: every message costs :data:`TOKENS_PER_MESSAGE` plus the
    tokens of its role, its text content, its ``name`` (plus one) and its tool calls' names and
    arguments; the request adds :data:`REPLY_PRIMING_TOKENS`. Tool and response-format schemas
    are not counted. An estimate, usually within a few tokens of what the API bills.
    """
    total = 0
    source = O200K_SOURCE if _encoder() is not None else CHARS_SOURCE
    any_message = False
    for message in messages:
        any_message = True
        total += TOKENS_PER_MESSAGE
        total += count_tokens(str(message.get("role", "")))[0]
        total += count_tokens(_content_text(message.get("content")))[0]
        name = message.get("name")
        if name:
            total += count_tokens(str(name))[0] + 1
        total += count_tokens(_tool_call_text(message))[0]
    if any_message:
        total += REPLY_PRIMING_TOKENS
    return total, source
