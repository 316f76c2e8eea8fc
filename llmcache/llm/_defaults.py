"""Every default of the LLM runtime, in one place.

Which model each tier runs when nothing else is configured, how a local model is served, and how
long a client waits. :class:`~llmcache.llm.LocalServer`, the settings of
:func:`~llmcache.llm.resolve_llm_backend`, ``python -m llmcache serve`` and the town's
``--llm`` all read them from here.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_CTX_PER_SLOT",
    "DEFAULT_MODEL",
    "DEFAULT_PARALLEL",
    "DEFAULT_SUPERIOR_MODEL",
    "LOCAL_CACHE_RAM_MIB",
    "LOCAL_STARTUP_TIMEOUT",
    "LOCAL_TIMEOUT",
    "OPENAI_DEFAULT_MODEL",
    "OPENAI_DEFAULT_SUPERIOR_MODEL",
    "SUPERIOR_CTX_PER_SLOT",
    "SUPERIOR_PARALLEL",
]

#: The model the simulation runs on when nothing else is configured: the fastest registered
#: model on the town's prompts. It answers valid JSON only under constrained decoding and its
#: judgements are close to random, hence a different superior tier.
DEFAULT_MODEL: Final = "smollm2-135m-q4_0"
#: The model invalid answers escalate to, and the default judge.
DEFAULT_SUPERIOR_MODEL: Final = "qwen2.5-coder-1.5b"

#: The tiers on OpenAI's API: the thesis's model, and a stronger one for escalation and judging.
OPENAI_DEFAULT_MODEL: Final = "gpt-4o-mini"
OPENAI_DEFAULT_SUPERIOR_MODEL: Final = "gpt-4o"

#: Slots of the local default model (requests decoded together, each with its prompt cache).
DEFAULT_PARALLEL: Final = 4
#: Context tokens per slot: a town prompt and its answer.
DEFAULT_CTX_PER_SLOT: Final = 4096
#: The superior model is asked less often, but judge prompts list several candidate answers:
#: fewer slots, longer context.
SUPERIOR_PARALLEL: Final = 2
SUPERIOR_CTX_PER_SLOT: Final = 8192

#: RAM prompt cache per local model (MiB): idle slots' prefixes are kept there and restored when
#: a later prompt shares them, so more agents than slots still find their prefix warm.
LOCAL_CACHE_RAM_MIB: Final = 2048
#: Seconds to wait for a local model to load: the superior model's file is large, and the first
#: load reads it from disk on cores that may be busy with the other model.
LOCAL_STARTUP_TIMEOUT: Final = 180.0

#: Seconds a client of a local server waits: CPU generation of a long answer can take minutes
#: on a busy machine with few cores.
LOCAL_TIMEOUT: Final = 600.0
