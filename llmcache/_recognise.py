"""Templates recognised from a prompt's text: which template a prompt was filled from, and
with which slot values.

A :class:`TemplateSet` holds the templates of a code base (built from
:class:`~llmcache.PromptTemplate` objects or read from a folder of template files). Given the
text a call sends, :meth:`TemplateSet.recognise` finds the template and the slot values that
fill to exactly that text, so that the call can be filed under the template with no changed
call site.

Recognition is exact or nothing. A template is a sequence of literal texts and slots; the
prompt must be that sequence with each slot replaced by a value, every occurrence of one slot
by the same value. Where several templates fit, or one template fits with more than one
assignment of values (two slots side by side with nothing between, a value that contains the
literal text after its slot), one structural rule of prompt files decides: a slot written
inside a line of text (``description of !<INPUT 0>!.``) holds one line, while a slot alone on
its line may hold several (a persona block). Park et al.'s files need it: a name slot followed
by ``.`` and a line break, then a persona block whose lines end the same way, fits every
line break otherwise. The rule is used only to choose among fits; a fit found without it is
taken as it is. Where the rule does not decide either, the prompt is *not* recognised and the
reason says why: a guess would file a call under the wrong table. The search is bounded
(``max_steps``), so that no prompt can make it run long.

It is fast: the templates are indexed by the literal text they begin with (or, for templates
that begin with a slot, end with), so a prompt is matched against the few templates that can
fit, not against all of them (``benchmarks/bench_recognition.py``).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ._errors import ConfigurationError
from ._template import FilledPrompt, PromptTemplate

__all__ = ["Recognition", "TemplateSet", "load_templates"]

_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_POSITIONAL = re.compile(r"!<INPUT (\d+)>!")

#: How many characters of a template's leading (or trailing) literal index it.
_INDEX_CHARS = 32

#: The default bound of one prompt's search: candidate slot ends tried, over every template.
DEFAULT_MAX_STEPS = 20_000


class Recognition(BaseModel):
    """What :meth:`TemplateSet.recognise` found: the template and its slot values, or why the
    prompt was not recognised (``template`` is then ``None``)."""

    model_config = ConfigDict(frozen=True)

    template: PromptTemplate | None = None
    slots: dict[str, str] = Field(default_factory=dict)
    reason: str | None = None

    @property
    def recognised(self) -> bool:
        return self.template is not None

    @property
    def filled(self) -> FilledPrompt | None:
        """The template filled with the recognised values: it sends exactly the prompt that
        was recognised, and its ``cache_options`` file the call under the template."""
        if self.template is None:
            return None
        return self.template.fill(**self.slots)

    def agent(self, default: str = "") -> str:
        """The agent the call belongs to: the value of the template's ``agent_slot``, else
        ``default``."""
        slot = self.template.agent_slot if self.template is not None else None
        return self.slots.get(slot, default) if slot is not None else default


# -- one template, compiled ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    name: str


_Part = str | _Slot


def _parts(text: str, pattern: re.Pattern[str]) -> list[_Part]:
    """``text`` as literals and slots, in order; no empty literal, no two literals in a row."""
    parts: list[_Part] = []
    at = 0
    for m in pattern.finditer(text):
        if m.start() > at:
            parts.append(text[at : m.start()])
        parts.append(_Slot(m.group(1)))
        at = m.end()
    if at < len(text):
        parts.append(text[at:])
    return parts


def _stripped(parts: list[_Part]) -> list[_Part]:
    """The parts of a prompt whose filled text is stripped (as ``PromptTemplate.fill`` does):
    the leading literal loses its leading whitespace and the trailing one its trailing."""
    parts = list(parts)
    if parts and isinstance(parts[0], str):
        parts[0] = parts[0].lstrip()
        if not parts[0]:
            parts.pop(0)
    if parts and isinstance(parts[-1], str):
        parts[-1] = parts[-1].rstrip()
        if not parts[-1]:
            parts.pop()
    return parts


@dataclass(frozen=True)
class _Compiled:
    template: PromptTemplate
    # The system text's parts (None: the template has no system text), then the prompt's.
    system: tuple[_Part, ...] | None
    user: tuple[_Part, ...]

    @property
    def prefix(self) -> str:
        return self.user[0] if self.user and isinstance(self.user[0], str) else ""

    @property
    def suffix(self) -> str:
        return self.user[-1] if self.user and isinstance(self.user[-1], str) else ""

    def literals(self) -> Iterator[str]:
        for part in (*(self.system or ()), *self.user):
            if isinstance(part, str):
                yield part


def _compile(template: PromptTemplate) -> _Compiled:
    pattern = _POSITIONAL if template.positional else _NAMED
    user = _stripped(_parts(template.prompt, pattern))
    system = tuple(_parts(template.system, pattern)) if template.system else None
    return _Compiled(template, system, tuple(user))


class _TooLong(Exception):
    """The search ran past its bound."""


class _Matcher:
    """All the ways (up to two) one template's parts fill to the given texts."""

    def __init__(
        self,
        segments: list[tuple[tuple[_Part, ...], str]],
        steps: list[int],
        *,
        one_line_inline: bool = False,
    ) -> None:
        self._segments = segments
        self._steps = steps  # [left]: shared by every template a prompt is matched against
        self._bound: dict[str, str] = {}
        # The tie-break rule (module documentation): a slot inside a line of text holds no
        # line break.
        self._one_line_inline = one_line_inline
        self.found: list[dict[str, str]] = []

    def run(self) -> list[dict[str, str]]:
        self._walk(0, 0, 0)
        return self.found

    def _step(self) -> None:
        self._steps[0] -= 1
        if self._steps[0] < 0:
            raise _TooLong

    def _walk(self, segment: int, i: int, pos: int) -> None:
        if len(self.found) > 1:
            return  # two ways already: ambiguous, whatever else fits
        parts, text = self._segments[segment]
        if i == len(parts):
            if pos != len(text):
                return
            if segment + 1 < len(self._segments):
                self._walk(segment + 1, 0, 0)
            else:
                self.found.append(dict(self._bound))
            return
        part = parts[i]
        if isinstance(part, str):
            if text.startswith(part, pos):
                self._walk(segment, i + 1, pos + len(part))
            return
        known = self._bound.get(part.name)
        if known is not None:
            if text.startswith(known, pos):
                self._walk(segment, i + 1, pos + len(known))
            return
        inline = self._one_line_inline and _inline(parts, i)
        for end in self._ends(parts, i, text, pos):
            self._step()
            if inline and "\n" in text[pos:end]:
                continue
            self._bound[part.name] = text[pos:end]
            try:
                self._walk(segment, i + 1, end)
            finally:
                del self._bound[part.name]
            if len(self.found) > 1:
                return

    def _ends(self, parts: tuple[_Part, ...], i: int, text: str, pos: int) -> Iterator[int]:
        """Where the value of the unbound slot ``parts[i]`` starting at ``pos`` may end."""
        if i + 1 == len(parts):
            yield len(text)
            return
        after = parts[i + 1]
        if isinstance(after, _Slot):
            value = self._bound.get(after.name)
            if value is None:
                # Two unbound slots side by side: any split; a later repeat may decide it.
                yield from range(pos, len(text) + 1)
                return
            after = value
            if not after:
                yield from range(pos, len(text) + 1)
                return
        elif i + 2 == len(parts):
            # The segment's last literal: it ends the text, so there is one place for it.
            end = len(text) - len(after)
            if end >= pos and text.endswith(after):
                yield end
            return
        found = text.find(after, pos)
        while found != -1:
            yield found
            found = text.find(after, found + 1)


def _inline(parts: tuple[_Part, ...], i: int) -> bool:
    """Whether the slot ``parts[i]`` shares its line with literal text."""
    before = parts[i - 1] if i > 0 else "\n"
    after = parts[i + 1] if i + 1 < len(parts) else "\n"
    alone = (
        isinstance(before, str)
        and before.endswith("\n")
        and isinstance(after, str)
        and after.startswith("\n")
    )
    return not alone


# -- a set of templates ---------------------------------------------------------------------------


class TemplateSet:
    """Templates to recognise prompts by (see the module documentation).

    ``TemplateSet(templates)`` takes :class:`~llmcache.PromptTemplate` objects;
    :meth:`from_folder` reads a folder of template files. Two templates of one text are one
    template: given under two names, they are refused (the text, not the name, is what a
    template's tables are keyed by). ``max_steps`` bounds the search for one prompt.
    """

    def __init__(
        self, templates: Iterable[PromptTemplate], *, max_steps: int = DEFAULT_MAX_STEPS
    ) -> None:
        if max_steps < 1:
            raise ConfigurationError("max_steps must be at least 1")
        self.max_steps = max_steps
        by_digest: dict[str, PromptTemplate] = {}
        for template in templates:
            if not isinstance(template, PromptTemplate):
                raise ConfigurationError(
                    f"a TemplateSet holds PromptTemplates, not {type(template).__name__}"
                )
            seen = by_digest.get(template.digest)
            if seen is not None and seen.name != template.name:
                raise ConfigurationError(
                    f"templates {seen.name!r} and {template.name!r} have the same text: keep one"
                )
            by_digest[template.digest] = template
        self.templates: tuple[PromptTemplate, ...] = tuple(by_digest.values())
        compiled = [_compile(t) for t in self.templates]
        # Indexed by the first characters of the leading literal; templates that begin with
        # a slot by the last characters of the trailing one; the rest are tried on every
        # prompt.
        self._by_prefix: dict[int, dict[str, list[_Compiled]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._by_suffix: dict[int, dict[str, list[_Compiled]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._others: list[_Compiled] = []
        for c in compiled:
            if c.prefix:
                key = c.prefix[:_INDEX_CHARS]
                self._by_prefix[len(key)][key].append(c)
            elif c.suffix:
                key = c.suffix[-_INDEX_CHARS:]
                self._by_suffix[len(key)][key].append(c)
            else:
                self._others.append(c)

    @classmethod
    def from_folder(
        cls, folder: str | os.PathLike[str], *, max_steps: int = DEFAULT_MAX_STEPS
    ) -> TemplateSet:
        """The templates of a folder's files (see :func:`load_templates`)."""
        return cls(load_templates(folder), max_steps=max_steps)

    def __len__(self) -> int:
        return len(self.templates)

    def __iter__(self) -> Iterator[PromptTemplate]:
        return iter(self.templates)

    def _candidates(self, prompt: str) -> Iterator[_Compiled]:
        for length, keyed in self._by_prefix.items():
            yield from keyed.get(prompt[:length], ())
        for length, keyed in self._by_suffix.items():
            if len(prompt) >= length:
                yield from keyed.get(prompt[len(prompt) - length :], ())
        yield from self._others

    def recognise(self, prompt: str, system: str | None = None) -> Recognition:
        """The template ``prompt`` (the user message's text) was filled from, with its slot
        values; ``system`` is the system message's text, which must fill the template's
        system text (a template without one recognises only prompts sent without one).

        Not recognised (``template`` ``None``, ``reason`` saying why) when no template fills
        to exactly these texts, when more than one does, when one does in more than one way,
        or when the search runs past ``max_steps``.
        """
        steps = [self.max_steps]
        matches: list[tuple[PromptTemplate, dict[str, str]]] = []
        try:
            for c in self._candidates(prompt):
                if (c.system is None) != (not system):
                    continue
                if not prompt.endswith(c.suffix) or not prompt.startswith(c.prefix):
                    continue
                if any(
                    literal not in prompt and literal not in (system or "")
                    for literal in c.literals()
                ):
                    continue
                segments = [(c.user, prompt)]
                if c.system is not None:
                    segments.insert(0, (c.system, system or ""))
                found = _Matcher(segments, steps).run()
                if len(found) > 1:
                    found = _Matcher(segments, steps, one_line_inline=True).run() or found
                if len(found) > 1:
                    return Recognition(
                        reason=f"template {c.template.name!r} fills to this prompt in more than "
                        "one way (slots side by side, or a value holding the text after its "
                        f"slot), even with slots inside a line holding one line: {_differ(found)}"
                    )
                if found:
                    matches.append((c.template, found[0]))
        except _TooLong:
            return Recognition(
                reason=f"recognising the prompt took more than {self.max_steps} steps"
            )
        if not matches:
            return Recognition(reason=f"no template of {len(self)} matches the prompt")
        if len(matches) > 1:
            names = ", ".join(repr(t.name) for t, _ in matches)
            return Recognition(reason=f"the prompt matches more than one template ({names})")
        template, slots = matches[0]
        return Recognition(template=template, slots=slots)


def _differ(found: list[dict[str, str]]) -> str:
    first, second = found[0], found[1]
    slots = [s for s in first if first[s] != second.get(s)]
    return f"slot(s) {', '.join(slots)} could hold different values"


# -- files ----------------------------------------------------------------------------------------


def load_templates(folder: str | os.PathLike[str]) -> list[PromptTemplate]:
    """Every ``.txt`` template file under ``folder`` (subfolders included, in path order),
    each read by :meth:`PromptTemplate.from_file`."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigurationError(f"no folder of templates at {root}")
    return [PromptTemplate.from_file(path) for path in sorted(root.rglob("*.txt"))]
