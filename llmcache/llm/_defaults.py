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
    "LOCAL_TIMEOUT",
    "OPENAI_DEFAULT_MODEL",
    "OPENAI_DEFAULT_SUPERIOR_MODEL",
    "SUPERIOR_CTX_PER_SLOT",
    "SUPERIOR_PARALLEL",
]

#: The model the simulation runs on when nothing else is configured.
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

#: Seconds a client of a local server waits: CPU generation of a long answer can take minutes
#: on a busy 2-core machine.
LOCAL_TIMEOUT: Final = 600.0
