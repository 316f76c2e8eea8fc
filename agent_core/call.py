"""One town prompt as one typed object: :class:`TownCall`.

A call holds what the town knows when it asks (template, agent, summary block, slot values, the
query's requirements, the situation a revision needs) and derives everything a request and the
cache need from it: the messages, the keywords, *this query's* JSON schema, ``max_tokens``, the
validator, and the revision prompt of a cached answer. The recorder writes the call's fields
into each dataset line (``metadata["call"]``), and :meth:`TownCall.from_record` reads a line
back into the same object, so experiments rebuild requests exactly as the town sent them.

Nothing here imports llmcache; :mod:`agent_core.llm` binds a call to the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .requirements import Requirements
from .revise import RevisionRequest, build_revision
from .schemas import MAX_ANSWER_TOKENS, worst_case_tokens
from .templates import SlotValue, Template, template

__all__ = ["CALL_KEY", "TownCall", "town_call"]

#: The metadata key under which a recorded line keeps its call.
CALL_KEY = "call"


class TownCall(BaseModel):
    """One prompt of the town, typed. See the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    category: str
    agent: str
    summary_block: str
    slots: dict[str, str | list[str]]
    # The simulated clock ("Monday, February 12, 2024, 08:30"), written last in the prompt.
    time: str | None = None
    requirements: Requirements = Field(default_factory=Requirements)
    # What a revision prompt needs beyond the cached answer and the rules (e.g. what the agent
    # is doing now and what it notices).
    context: dict[str, str] = Field(default_factory=dict)
    # What the town records about the moment (simulated time, observed actors, ...).
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def template(self) -> Template[Any]:
        return template(self.category)

    @property
    def group(self) -> str:
        return self.template.group

    def messages(self) -> list[dict[str, str]]:
        return self.template.render(self.summary_block, self.agent, self.slots, self.time)

    def keywords(self) -> list[str]:
        """The keyword slot values; the category name when the slots happen to be empty (keyword
        mode refuses an empty list, and the category is the honest stand-in)."""
        return self.template.keywords(self.slots) or [self.category]

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` of this query: the template's schema narrowed to its places,
        options, window and counts, for constrained decoding."""
        return self.template.response_format(self.requirements)

    @property
    def max_tokens(self) -> int:
        """The template's answer cap (what a request with the template's plain schema gets)."""
        return self.template.max_tokens

    def answer_tokens(self) -> int:
        """The ``max_tokens`` of a request with this query's schema: the most tokens any answer
        the schema allows can take, so no answer is cut off before its closing brace."""
        schema = self.response_format()["json_schema"]["schema"]
        return min(MAX_ANSWER_TOKENS, worst_case_tokens(schema))

    def parse(self, content: str) -> Any:
        """The answer as a validated response; ``ValueError`` if it is not valid for this query."""
        return self.template.parse(content, self.requirements)

    def validator(self) -> Callable[[str], Any]:
        return self.template.validator(self.requirements)

    def revision(self, cached_content: str) -> list[dict[str, str]] | None:
        """The revision prompt that rewrites ``cached_content`` for this query, or ``None`` when
        the template does not revise or the cached answer cannot be revised."""
        if self.template.modifier != "revise":
            return None
        return build_revision(
            RevisionRequest(
                category=self.category,
                name=self.agent,
                cached_content=cached_content,
                requirements=self.requirements,
                context=self.context,
            )
        )

    def record_metadata(self) -> dict[str, Any]:
        """What the recorder writes as the line's metadata: the town's moment, the group, the
        query's rules, and the call itself (for :meth:`from_record`)."""
        meta: dict[str, Any] = {**self.metadata, "group": self.group}
        rules = self.requirements.model_dump(exclude_none=True)
        if rules:
            # Lets a dataset reader re-check any recorded answer (valid or refused).
            meta["requirements"] = rules
        meta[CALL_KEY] = self.model_dump(mode="json", exclude={"metadata"})
        return meta

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | BaseModel) -> TownCall:
        """The call a recorded line (a ``RecordedCall`` or its JSON dict) was made for.

        ``ValueError`` when the line was not recorded by this town (no ``call`` metadata)."""
        data = record.model_dump() if isinstance(record, BaseModel) else dict(record)
        metadata = dict(data.get("metadata") or {})
        call = metadata.pop(CALL_KEY, None)
        if not isinstance(call, Mapping):
            raise ValueError(
                "this record carries no town call (metadata['call']): it was not recorded by "
                "agent_core's TownLLM, or by an older version"
            )
        for derived in ("group", "requirements"):
            metadata.pop(derived, None)
        return cls.model_validate({**call, "metadata": metadata})


def town_call(
    t: Template[Any],
    *,
    agent: str,
    summary_block: str,
    slots: Mapping[str, SlotValue],
    requirements: Requirements | None = None,
    context: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    time: str | None = None,
) -> TownCall:
    """The typed call of one templated prompt."""
    return TownCall(
        category=t.category,
        agent=agent,
        summary_block=summary_block,
        time=time,
        slots={k: v if isinstance(v, str) else list(v) for k, v in slots.items()},
        requirements=requirements or Requirements(),
        context=dict(context or {}),
        metadata=dict(metadata or {}),
    )
