"""Prompt templates that know their cache options: adopting the cache is one line per prompt.

A :class:`PromptTemplate` has a name and a text with slots, either named (``{event}``) or
positional in the style of Park et al.'s prompt files (``!<INPUT 0>!``, with everything up to
a ``<commentblockmarker>###</commentblockmarker>`` line being the file's notes, not the prompt).
Filling it gives the messages to send and the matching :class:`CacheOptions`: the category is
the template's name, and the slot values go with the call by slot name. In keyword mode the
cache then chooses by default which slots to embed from what varies within the table (one
template, one agent): a slot whose value never changes there (the agent's name, its persona
summary) tells queries apart not at all, so the slots whose values have varied are embedded,
shortest first so that no truncation cuts the one that decides (all of them until the table has
seen one vary; see ``llmcache/_slots.py``). ``keyword_slots`` overrides that choice with slots of
your own, in your order. ``exact_slots`` names slots whose values must match exactly for a hit;
a value that is a time, a date or a numeric range is exact by default
(``CacheConfig(detect_exact=False)`` turns that off). The call in an existing code base changes
from

    reply = client.chat.completions.create(model=m, messages=[{"role": "user", "content": p}])

to

    reply = client.chat.completions.create(model=m, **POIGNANCY.fill(*inputs).request(agent=a))

>>> t = PromptTemplate(name="importance", text="Rate how important this is: {event}")
>>> filled = t.fill(event="Tree in Victoria Park is idle")
>>> filled.messages
[{'role': 'user', 'content': 'Rate how important this is: Tree in Victoria Park is idle'}]
>>> options = filled.cache_options(agent="Liam")
>>> (options.category, options.agent, options.slots, options.keywords)
('importance', 'Liam', {'event': 'Tree in Victoria Park is idle'}, None)
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._errors import ConfigurationError
from ._types import CacheOptions

__all__ = ["FilledPrompt", "PromptTemplate"]

_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: A notes line naming the agent's slot: ``agent slot: !<INPUT 0>!`` / ``{name}`` / ``0``.
_AGENT_NOTE = re.compile(
    r"^[ \t]*agent[ _]slot[ \t]*:[ \t]*"
    r"(?:!<INPUT (\d+)>!|\{([A-Za-z_][A-Za-z0-9_]*)\}|(\w+))[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_POSITIONAL = re.compile(r"!<INPUT (\d+)>!")
#: Park et al.'s prompt files: notes (the variables' meanings) above this line, the prompt below.
COMMENT_MARKER = "<commentblockmarker>###</commentblockmarker>"


class FilledPrompt(BaseModel):
    """A template with its slots filled: what to send, and how the cache should file it."""

    model_config = ConfigDict(frozen=True)

    category: str
    text: str
    system: str | None = None
    keywords: tuple[str, ...]
    #: The template's own choice of keyword slots (``None``: the cache chooses).
    keyword_slots: tuple[str, ...] | None = None
    #: The template's identity (:attr:`PromptTemplate.digest`), its slot values by slot name,
    #: and the slots whose values must match exactly for a hit.
    template: str | None = None
    slots: dict[str, str] = Field(default_factory=dict)
    exact_slots: tuple[str, ...] = ()

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages: the template's system text, if any, then the filled prompt."""
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": self.text})
        return messages

    def cache_options(self, *, agent: str = "", **fields: Any) -> CacheOptions:
        """``CacheOptions(category=<template name>, agent=agent, slots=<slot values>, ...)``
        with the template's identity and exact slots, and ``keywords`` only when the template
        names its ``keyword_slots`` (otherwise the cache chooses the slots to embed);
        ``fields`` are any other options (``mode``, ``validator``, ``options``, …) and win."""
        given: dict[str, Any] = {"category": self.category, "agent": agent}
        given["template"] = self.template
        if self.slots:
            given["slots"] = dict(self.slots)
            given["exact_slots"] = self.exact_slots
        if self.keyword_slots is not None or not self.slots:
            given["keywords"] = self.keywords
        return CacheOptions(**{**given, **fields})

    def request(self, *, agent: str = "", **fields: Any) -> dict[str, Any]:
        """``messages=`` and ``cache=`` for ``chat.completions.create`` / ``parse``."""
        return {"messages": self.messages, "cache": self.cache_options(agent=agent, **fields)}


class PromptTemplate(BaseModel):
    """A named prompt with slots; see the module documentation.

    ``keyword_slots`` picks the slots whose values are the keywords (names, or indexes as text
    for positional slots), in that order; by default the cache chooses them per table from the
    slots whose values vary (see the module documentation). ``exact_slots`` names slots whose
    values must match exactly for a hit. A template uses named slots or positional ones, not
    both.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    text: str
    system: str | None = None
    keyword_slots: tuple[str, ...] | None = None
    exact_slots: tuple[str, ...] = ()
    #: The slot that holds the agent's name: a recognised prompt (``CachedLLM(templates=)``)
    #: is filed under the agent this slot holds.
    agent_slot: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _agent_from_notes(cls, data: Any) -> Any:
        # The notes may name the agent's slot (see from_file); a given agent_slot wins.
        if isinstance(data, dict) and data.get("agent_slot") is None:
            head, marker, _ = str(data.get("text", "")).partition(COMMENT_MARKER)
            found = _AGENT_NOTE.search(head) if marker else None
            if found is not None:
                data = {**data, "agent_slot": found.group(1) or found.group(2) or found.group(3)}
        return data

    @model_validator(mode="after")
    def _check(self) -> PromptTemplate:
        if _NAMED.search(self.prompt) and _POSITIONAL.search(self.prompt):
            raise ValueError(f"template {self.name!r} mixes {{named}} and !<INPUT n>! slots")
        named = (*(self.keyword_slots or ()), *self.exact_slots, *filter(None, [self.agent_slot]))
        unknown = [s for s in named if s not in self.slots]
        if unknown:
            raise ValueError(
                f"template {self.name!r} has no slot {', '.join(map(repr, unknown))}; "
                f"its slots are {', '.join(self.slots) or 'none'}"
            )
        return self

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, name: str | None = None, **fields: Any
    ) -> PromptTemplate:
        """A template read from a text file (UTF-8), named by the file's stem.

        The file is the template's ``text``: ``!<INPUT n>!`` slots (Park et al.'s prompt
        files) or ``{named}`` ones, with optional notes above a
        ``<commentblockmarker>###</commentblockmarker>`` line. A notes line
        ``agent slot: <slot>`` (``agent slot: !<INPUT 0>!``, ``agent slot: {name}`` or
        ``agent slot: 0``) names the slot that holds the agent's name (in any template whose
        ``agent_slot`` is not given). ``fields`` are any other fields (``system``,
        ``keyword_slots``, ``exact_slots``, ``agent_slot`` …).
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read the template file {file}: {exc}") from exc
        try:
            return cls(**{"name": name or file.stem, "text": text, **fields})
        except ValueError as exc:
            raise ConfigurationError(f"template file {file}: {exc}") from exc

    @property
    def notes(self) -> str:
        """The notes above a Park-style marker line (empty without one): not sent, not part
        of the template's identity."""
        head, marker, _ = self.text.partition(COMMENT_MARKER)
        return head if marker else ""

    @property
    def prompt(self) -> str:
        """The text that is sent: without a Park-style notes block above the marker line."""
        head, marker, body = self.text.partition(COMMENT_MARKER)
        return body if marker else head

    @property
    def digest(self) -> str:
        """The template's identity: a hash of what it sends (prompt and system text), not of
        its name, so that two templates that share a name never share a table and a renamed
        template keeps its tables."""
        h = hashlib.sha256()
        for part in (self.prompt.strip(), self.system or ""):
            h.update(part.encode("utf-8", "backslashreplace"))
            h.update(b"\x00")
        return h.hexdigest()[:32]

    @property
    def positional(self) -> bool:
        return bool(_POSITIONAL.search(self.prompt))

    @property
    def slots(self) -> tuple[str, ...]:
        """The slot names in order of first appearance (``"0"``, ``"1"`` … when positional,
        in index order)."""
        if self.positional:
            found = {int(n) for n in _POSITIONAL.findall(self.prompt)}
            return tuple(str(n) for n in sorted(found))
        return tuple(dict.fromkeys(_NAMED.findall(self.prompt)))

    def fill(self, *inputs: Any, **values: Any) -> FilledPrompt:
        """Fill the slots: positionally (``fill(name, event)``, as Park et al.'s
        ``generate_prompt(curr_input, ...)``) or by name (``fill(event=...)``)."""
        given = self._values(inputs, values)
        pattern = _POSITIONAL if self.positional else _NAMED

        def fill(text: str) -> str:
            return pattern.sub(lambda m: given[m.group(1)], text)

        chosen = self.keyword_slots if self.keyword_slots is not None else self.slots
        return FilledPrompt(
            category=self.name,
            text=fill(self.prompt).strip(),
            system=fill(self.system) if self.system else None,
            keywords=tuple(given[s] for s in chosen),
            keyword_slots=self.keyword_slots,
            template=self.digest,
            slots={s: given[s] for s in self.slots},
            exact_slots=self.exact_slots,
        )

    def _values(self, inputs: tuple[Any, ...], values: dict[str, Any]) -> dict[str, str]:
        if inputs and values:
            raise ConfigurationError("fill a template by position or by name, not both")
        if inputs:
            if not self.positional and len(inputs) != len(self.slots):
                raise ConfigurationError(
                    f"template {self.name!r} has {len(self.slots)} slots "
                    f"({', '.join(self.slots)}), given {len(inputs)} values"
                )
            names = self.slots if not self.positional else tuple(map(str, range(len(inputs))))
            values = dict(zip(names, inputs, strict=True))
        missing = [s for s in self.slots if s not in values]
        # Positional inputs the prompt does not use are ignored, as Park et al.'s
        # generate_prompt ignores them: their input lists often carry more than one prompt needs.
        extra = [] if self.positional else [k for k in values if k not in self.slots]
        if missing or extra:
            problems = []
            if missing:
                problems.append(f"no value for {', '.join(missing)}")
            if extra:
                problems.append(f"no slot {', '.join(extra)}")
            raise ConfigurationError(
                f"template {self.name!r}: {'; '.join(problems)} "
                f"(its slots are {', '.join(self.slots) or 'none'})"
            )
        return {k: str(v) for k, v in values.items()}
