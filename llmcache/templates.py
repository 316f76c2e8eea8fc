"""Prompt templates recognised from the text a call sends, declared or learned.

``CachedLLM(OpenAI(), templates="prompts/")`` files every call made without ``cache=`` under
the template its prompt was filled from (see the README's "Adopting an existing code base").
:class:`TemplateSet` is that recognition on its own; :class:`Recognition` what it finds.
``CachedLLM(OpenAI(), learn_templates=True)`` learns the templates from the traffic instead:
:class:`TemplateLearner` is that learning on its own; :class:`LearnedTemplate` what it learned.
It learns each code site's prompts apart (read from the stack); :func:`code_site` names a site,
:func:`text_alone` learns by the text alone (as the proxy does: its requests carry no stack).
"""

from __future__ import annotations

from ._learn import LearnedTemplate, TemplateLearner
from ._recognise import Recognition, TemplateSet, load_templates
from ._site import code_site, text_alone

__all__ = [
    "LearnedTemplate",
    "Recognition",
    "TemplateLearner",
    "TemplateSet",
    "code_site",
    "load_templates",
    "text_alone",
]
