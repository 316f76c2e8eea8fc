"""Prompt templates recognised from the text a call sends.

``CachedLLM(OpenAI(), templates="prompts/")`` files every call made without ``cache=`` under
the template its prompt was filled from (see the README's "Adopting an existing code base").
:class:`TemplateSet` is that recognition on its own; :class:`Recognition` what it finds.
"""

from __future__ import annotations

from ._recognise import Recognition, TemplateSet, load_templates

__all__ = ["Recognition", "TemplateSet", "load_templates"]
