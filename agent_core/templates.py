"""The 14 prompt categories of the town, each a declared :class:`Template`.

A template declares its category, its analysis group, its text (the agent summary block, then
the template body with its slots, then the JSON answer format as in the study), which slots are
*keywords* (the values a keyword-mode cache embeds), its pydantic response schema, the
query-specific rules an answer must also meet (:class:`Requirements`), and how a cached answer is
reused: ``read``, ``choose`` or ``revise`` (thesis Table 3.3); ``None`` means the category
bypasses the cache (the dialogue group, thesis 3.3.3).

Nothing here imports llmcache: :mod:`agent_core.llm` turns these declarations into cache
policies, so the templates stay testable and the cache stays free of agent knowledge.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from .requirements import Requirements, canonical_option
from .responses import (
    ActorReactionResponse,
    AgentReactionResponse,
    DecompositionResponse,
    ImportanceBatchResponse,
    ImportanceResponse,
    InitialPlanResponse,
    InsightsResponse,
    LocationResponse,
    PlanRevisionResponse,
    QuestionsResponse,
    StatusResponse,
    SummaryResponse,
    UtteranceResponse,
    parse_lenient,
    strict_schema,
)
from .rules import (
    DAY_WINDOW,
    DECOMPOSITION_RULE,
    INITIAL_PLAN_RULE,
    INSIGHT_COUNT,
    QUESTION_COUNT,
    REACTION_MINUTES,
    REVISION_RULE,
    ScheduleRule,
)
from .schemas import narrow_choice, narrow_insights, narrow_location, narrowed
from .text import copies_placeholder, degenerate, format_literals, placeholder_patterns
from .tolerance import (
    SameOption,
    SamePlaces,
    SameReaction,
    SameStatus,
    SimilarText,
    TextAgreement,
    Tolerance,
    Verdict,
    Within,
)

__all__ = [
    "ACTOR_REACTION",
    "ACTOR_STATUS",
    "AGENT_REACTION",
    "CATEGORIES",
    "DECOMPOSITION",
    "DIALOGUE_SUMMARY",
    "FINDING_LOCATION",
    "GROUPS",
    "IMPORTANCE",
    "INITIAL_PLAN",
    "INSIGHTS",
    "MEMORY_SUMMARY",
    "QUESTIONS",
    "RELATIONSHIP",
    "REVISION",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "UTTERANCE",
    "Requirements",
    "Slot",
    "SlotValue",
    "Template",
    "canonical_option",
    "category_of_schema_name",
    "choose_extract",
    "choose_render",
    "template",
]

R = TypeVar("R", bound=BaseModel)
SlotValue = str | Sequence[str]
ModifierKind = Literal["read", "choose", "revise"]

SYSTEM_PROMPT = (
    "You simulate {name}, a resident of a small town, in a life simulation. "
    "Answer with one JSON object in the requested format and nothing else."
)

# The analysis groups of the study, in its order; every category belongs to exactly one.
GROUPS = (
    "importance",
    "plan making and revision",
    "finding location",
    "actor reaction",
    "memory reflection",
    "memory summary",
    "new actor statuses",
    "dialogue",
)


@dataclass(frozen=True)
class Slot:
    """A named hole in a template's text.

    ``style`` says how a list value is written: ``json`` (a JSON list, for options a model
    must copy exactly), ``numbered`` (``1. …`` lines, for statements an answer cites by
    number), ``lines`` (one per line). ``keyword`` marks the slots a keyword cache embeds.
    """

    name: str
    keyword: bool = False
    style: Literal["text", "json", "numbered", "lines"] = "text"

    def render(self, value: SlotValue) -> str:
        if isinstance(value, str):
            return value
        items = [str(v) for v in value]
        if self.style == "json":
            return json.dumps(items, ensure_ascii=False)
        if self.style == "numbered":
            return "\n".join(f"{i}. {v}" for i, v in enumerate(items, start=1)) or "(none)"
        return "\n".join(items) or "(none)"


@dataclass(frozen=True)
class Template(Generic[R]):
    """One declared prompt category. See the module docstring."""

    category: str
    group: str
    body: str
    slots: tuple[Slot, ...]
    response: type[R]
    answer_format: str
    modifier: ModifierKind | None
    check: Callable[[R, Requirements], None] | None = None
    # Narrows a copy of the template's JSON schema to one query's requirements (agent_core.
    # schemas): what a constrained decoder then lets the model write.
    narrow: Callable[[dict[str, Any], Requirements], None] | None = None
    # A schedule-valued answer's rule: it checks the answer and narrows the schema (in place of
    # ``check`` and ``narrow``), and revision prompts state it.
    schedule: ScheduleRule | None = None
    # The answer's ``max_tokens`` when the request carries the template's plain schema: room for
    # the longest valid answer seen plus a margin (Qwen pretty-prints: a valid 7-item plan took
    # 339 tokens). A request with the query's own schema is sent that schema's worst case
    # instead (``TownCall.answer_tokens``), which no answer can outrun.
    max_tokens: int = 256
    # How far an answer may stray from the query's true answer and still be acceptable
    # (agent_core.tolerance); every one must hold. Empty: any valid answer agrees.
    tolerance: tuple[Tolerance, ...] = ()

    @property
    def bypass(self) -> bool:
        return self.modifier is None

    @property
    def keyword_slots(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots if s.keyword)

    def keywords(self, slots: Mapping[str, SlotValue]) -> list[str]:
        """The keyword slot values in declaration order; a list slot gives one keyword per
        element, because the cache joins keywords with single spaces (``"A B C"``)."""
        out: list[str] = []
        for slot in self.slots:
            if not slot.keyword:
                continue
            value = slots[slot.name]
            out.extend([value] if isinstance(value, str) else [str(v) for v in value])
        return [k for k in out if k.strip()]

    def render(
        self,
        summary_block: str,
        name: str,
        slots: Mapping[str, SlotValue],
        time: str | None = None,
    ) -> list[dict[str, str]]:
        """The chat messages of this prompt: the agent summary block, the JSON answer format,
        the template body with its slots filled, and the current ``time`` if given."""
        missing = [s.name for s in self.slots if s.name not in slots]
        if missing:
            raise KeyError(f"{self.category}: missing slots {missing}")
        values = {s.name: s.render(slots[s.name]) for s in self.slots}
        body = self.body.format(name=name, **values)
        answer = self.answer_format.replace("{name}", name)
        # The answer format goes before the body, not after it: everything up to the first
        # slot value is then the same for every prompt of this template and agent, and the
        # server's prefix cache skips it. For the importance score (half of the town's prompts)
        # only the memory itself is left to read.
        user = f"{summary_block}\n\nAnswer in JSON format: {answer}\n\n{body}"
        if time is not None:
            # Last for the same reason: the clock moves every step, and whatever follows it in
            # the prompt would have to be read again.
            user += f"\nCurrent time: {time}"
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(name=name)},
            {"role": "user", "content": user},
        ]

    def parse(self, content: str, requirements: Requirements | None = None) -> R:
        """The answer as a validated response; ``ValueError`` if it is not a valid answer to
        this query."""
        result = parse_lenient(self.response, content)
        req = requirements or Requirements()
        if self.schedule is not None:
            self.schedule.check(result, req)
        if self.check is not None:
            self.check(result, req)
        for text in _strings(result.model_dump()):
            if self._echoes(text):
                raise ValueError("the answer repeats its format's placeholder instead of answering")
            why = degenerate(text)
            if why is not None:
                raise ValueError(f"the answer is degenerate: {why}")
        return result

    def flaws(self, content: str) -> tuple[bool, bool]:
        """Whether an answer's text (every string of its JSON, or the text itself) echoes its
        format's placeholder or literal, and whether it is degenerate: the checks of
        :meth:`parse`, for counting what a run recorded before they existed."""
        try:
            value: Any = json.loads(content)
        except ValueError:
            value = content
        strings = _strings(value)
        return (
            any(self._echoes(s) for s in strings),
            any(degenerate(s) is not None for s in strings),
        )

    def _echoes(self, text: str) -> bool:
        return copies_placeholder(text, self._placeholders) or any(
            literal in text for literal in self._literals
        )

    @functools.cached_property
    def _placeholders(self) -> tuple[re.Pattern[str], ...]:
        return placeholder_patterns(self.answer_format)

    @functools.cached_property
    def _literals(self) -> tuple[str, ...]:
        return format_literals(self.answer_format)

    @property
    def uses_text(self) -> bool:
        """Whether judging acceptability needs a :class:`TextAgreement` (a text tolerance)."""
        return any(t.uses_text for t in self.tolerance)

    def tolerance_text(self, content: str) -> str | None:
        """The text a text tolerance compares of an answer (what calibrates its bound), or
        ``None`` when the template has no text tolerance or ``content`` does not parse."""
        tolerance = next((t for t in self.tolerance if t.uses_text), None)
        if tolerance is None:
            return None
        try:
            return tolerance.text(parse_lenient(self.response, content))
        except ValueError:
            return None

    def acceptable(
        self,
        content: str,
        truth: str,
        requirements: Requirements | None = None,
        *,
        text: TextAgreement | None = None,
    ) -> Verdict:
        """Whether ``content``, served for a query whose true answer is ``truth``, is an
        acceptable answer: it meets every requirement of the query and agrees with the truth
        within this template's tolerance. ``text`` (a similarity and this category's
        calibrated bound) is needed when :attr:`uses_text`; ``ValueError`` without it."""
        req = requirements or Requirements()
        try:
            answer = self.parse(content, req)
        except ValueError as exc:
            return Verdict(acceptable=False, reason=f"fails the query's requirements: {exc}")
        try:
            true = self.parse(truth, req)
        except ValueError:
            # A recorded truth was valid when it was recorded; a rule changed since is no
            # reason to stop comparing what it says.
            true = parse_lenient(self.response, truth)
        for tolerance in self.tolerance:
            reason = tolerance.check(answer, true, req, text)
            if reason is not None:
                return Verdict(acceptable=False, reason=reason)
        return Verdict(acceptable=True)

    def validator(self, requirements: Requirements | None = None) -> Callable[[str], R]:
        """A validator for the cache: accepts an answer's text or raises ``ValueError``."""

        def validate(content: str) -> R:
            return self.parse(content, requirements)

        return validate

    def json_schema(self, requirements: Requirements | None = None) -> dict[str, Any]:
        """The template's strict schema; with ``requirements``, narrowed to that query (its
        places, options, window and counts: see :mod:`agent_core.schemas`)."""
        base = strict_schema(self.response)
        if requirements is None:
            return base
        narrow = self.schedule.narrow if self.schedule is not None else self.narrow
        return narrowed(base, narrow, requirements)

    def response_format(self, requirements: Requirements | None = None) -> dict[str, Any]:
        """The ``response_format`` of a request (of one query, given its ``requirements``);
        its name carries the category, which lets a test double (and a log reader) tell the
        prompt's category without parsing it."""
        return {
            "type": "json_schema",
            "json_schema": {
                "name": _schema_name(self.category),
                "schema": self.json_schema(requirements),
                "strict": True,
            },
        }


def _strings(answer: Any) -> list[str]:
    """Every string value of ``answer`` (a JSON value), however deep."""
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(answer)
    return found


def _schema_name(category: str) -> str:
    # json_schema names allow only [A-Za-z0-9_-].
    return category.replace(" ", "_")


def category_of_schema_name(name: str) -> str:
    return name.replace("_", " ")


# -- query-specific checks ---------------------------------------------------------------------


def _check_location(r: LocationResponse, req: Requirements) -> None:
    if req.options is not None:
        chosen = canonical_option(r.location, req.options)
        if chosen is None:
            raise ValueError(f"location {r.location!r} is not one of the options")
        r.location = chosen


def _check_choice(r: ActorReactionResponse | AgentReactionResponse, req: Requirements) -> None:
    if req.options is not None:
        chosen = canonical_option(r.choice, req.options)
        if chosen is None:
            raise ValueError(f"choice {r.choice!r} is not one of the options")
        r.choice = chosen


def _check_insights(r: InsightsResponse, req: Requirements) -> None:
    if req.statements is None:
        return
    for i, insight in enumerate(r.insights, start=1):
        if not all(1 <= e <= req.statements for e in insight.evidence):
            raise ValueError(f"insight {i} cites a statement outside 1..{req.statements}")


# -- choose: the option a cached answer picked, and an answer picking another -----------------


def choose_extract(content: str, options: Sequence[str]) -> str | None:
    """The location a cached ``finding location`` answer chose (``None`` if unreadable)."""
    try:
        return parse_lenient(LocationResponse, content).location
    except ValueError:
        return None


def choose_render(content: str, option: str) -> str:
    """A ``finding location`` answer that picks ``option``."""
    return json.dumps({"location": option}, ensure_ascii=False)


# -- the declarations ---------------------------------------------------------------------------

_MINUTES = f"{REACTION_MINUTES[0]} to {REACTION_MINUTES[1]}"

_PLAN_FORMAT = (
    '{"start": "HH:MM", "end": "HH:MM", "activity": "<what {name} is doing, e.g. having '
    'breakfast>", '
    '"location": "<one of the places>"}'
)

_POIGNANCY_SCALE = (
    "On the scale of 1 to 10, where 1 is purely mundane (e.g., brushing teeth, making the "
    "bed, an idle chair) and 10 is extremely poignant (e.g., a break up, a college "
    "acceptance), rate the likely poignancy of "
)

IMPORTANCE = Template(
    category="importance score",
    group="importance",
    body=_POIGNANCY_SCALE + "the following memory for {name}.\nMemory: {memory}",
    slots=(Slot("memory", keyword=True),),
    response=ImportanceResponse,
    answer_format='{"score": <an integer from 1 to 10>}',
    modifier="read",
    max_tokens=16,
    tolerance=(Within("score", 1),),
)

#: Several memories of one moment rated in one prompt (:mod:`agent_core.rating_batch`). Not one of
#: the town's categories: each rating is still asked, cached and recorded as its own
#: ``importance score`` call; this prompt only answers the ones the cache did not.
IMPORTANCE_BATCH = Template(
    category="importance scores",
    group="importance",
    body=_POIGNANCY_SCALE
    + "each of the following memories for {name}: one score per memory, in the order listed.\n"
    "Memories:\n{memories}",
    slots=(Slot("memories", style="numbered"),),
    response=ImportanceBatchResponse,
    answer_format='{"scores": [<an integer from 1 to 10 for each memory>]}',
    modifier="read",
)

INITIAL_PLAN = Template(
    category="initial plan generation",
    group="plan making and revision",
    body=(
        "Today is {date}. Plan {name}'s day in broad strokes: "
        f"{INITIAL_PLAN_RULE.count_text()} activities in time order, each at least "
        f"{INITIAL_PLAN_RULE.min_minutes} minutes long, between {DAY_WINDOW[0]} and "
        f"{DAY_WINDOW[1]}, each at one of the places {{name}} knows. Sleep is not an activity: "
        "the day ends when the last activity ends.\n"
        "Yesterday: {yesterday}\n"
        "Day of the week: {weekday}\n"
        "Places (JSON list): {places}"
    ),
    slots=(
        Slot("date"),
        Slot("yesterday"),
        Slot("weekday", keyword=True),
        Slot("places", keyword=True, style="json"),
    ),
    response=InitialPlanResponse,
    answer_format='{"plans": [' + _PLAN_FORMAT + ", ...]}",
    modifier="revise",
    schedule=INITIAL_PLAN_RULE,
    max_tokens=768,
    tolerance=(SamePlaces("plans"),),
)

DECOMPOSITION = Template(
    category="plan decomposition",
    group="plan making and revision",
    body=(
        "From {start} to {end}, {name} plans to be at {location}, {activity}. Break this into "
        f"{DECOMPOSITION_RULE.count_text()} consecutive tasks of at least "
        f"{DECOMPOSITION_RULE.min_minutes} minutes each that together cover exactly {{start}} "
        "to {end}.\n"
        "Plan: {activity}\n"
        "Location: {location}\n"
        "Time window: {start} to {end}\n"
        "Places (JSON list): {places}"
    ),
    slots=(
        Slot("activity", keyword=True),
        Slot("location", keyword=True),
        Slot("start"),
        Slot("end"),
        Slot("places", style="json"),
    ),
    response=DecompositionResponse,
    answer_format='{"tasks": [' + _PLAN_FORMAT + ", ...]}",
    modifier="revise",
    schedule=DECOMPOSITION_RULE,
    max_tokens=768,
    tolerance=(SamePlaces("tasks"),),
)

REVISION = Template(
    category="future plan revision",
    group="plan making and revision",
    body=(
        "{event}\n"
        "{name} is busy with this until {start}. Revise the rest of today's plan so that it "
        "fits between {start} and {end}: keep what still makes sense, move or shorten plans, and "
        f"skip plans that no longer fit. Each plan must be at least {REVISION_RULE.min_minutes} "
        "minutes long and use one of the places.\n"
        "Remaining plans (JSON): {remaining}\n"
        "Time window: {start} to {end}\n"
        "Places (JSON list): {places}"
    ),
    slots=(
        Slot("event", keyword=True),
        Slot("remaining_activities", keyword=True, style="json"),
        Slot("remaining"),
        Slot("start"),
        Slot("end"),
        Slot("places", style="json"),
    ),
    response=PlanRevisionResponse,
    answer_format='{"plans": [' + _PLAN_FORMAT + ", ...]}",
    modifier="revise",
    schedule=REVISION_RULE,
    max_tokens=1024,
    tolerance=(SamePlaces("plans"),),
)

FINDING_LOCATION = Template(
    category="finding location",
    group="finding location",
    body=(
        "{name} is going to {task}. Which of these {what} is the best fit for it? Answer with "
        "one option exactly as written.\n"
        "Task: {task}\n"
        "Options (JSON list): {options}"
    ),
    slots=(Slot("task", keyword=True), Slot("what"), Slot("options", keyword=True, style="json")),
    response=LocationResponse,
    answer_format='{"location": "<one of the options>"}',
    modifier="choose",
    check=_check_location,
    narrow=narrow_location,
    max_tokens=48,
    tolerance=(SameOption("location"),),
)

ACTOR_REACTION = Template(
    category="actor reaction",
    group="actor reaction",
    body=(
        "{name} is currently {current}.\n"
        "{name} notices: {observation}.\n"
        "How does {name} react? Pick one option exactly as written, then say what {name} will do "
        f"and for how many minutes ({_MINUTES}).\n"
        "Observation: {observation}\n"
        "Options (JSON list): {options}"
    ),
    slots=(
        Slot("current", keyword=True),
        Slot("observation", keyword=True),
        Slot("options", style="json"),
    ),
    response=ActorReactionResponse,
    answer_format=(
        '{"choice": "<one of the options>", '
        '"activity": "<what {name} will be doing, e.g. making tea>", '
        f'"minutes": <{_MINUTES}>}}'
    ),
    modifier="revise",
    check=_check_choice,
    narrow=narrow_choice,
    max_tokens=96,
    tolerance=(SameReaction("choice"),),
)

QUESTIONS = Template(
    category="high-level questions",
    group="memory reflection",
    body=(
        "Statements about {name}:\n{statements}\n\n"
        f"Given only the statements above, what are the {QUESTION_COUNT} most salient high-level "
        "questions we can answer about {name}?"
    ),
    slots=(Slot("statements", keyword=True, style="numbered"),),
    response=QuestionsResponse,
    answer_format=(
        '{"questions": ['
        + ", ".join(f'"<question {i}>"' for i in range(1, QUESTION_COUNT + 1))
        + "]}"
    ),
    modifier="read",
    max_tokens=160,
    tolerance=(SimilarText("questions"),),
)

INSIGHTS = Template(
    category="high-level insights",
    group="memory reflection",
    body=(
        "Statements about {name}:\n{statements}\n\n"
        "Question: {question}\n"
        f"What {INSIGHT_COUNT} high-level insights about {{name}} can you infer from the "
        "statements above? Cite the numbers of the statements each insight is based on."
    ),
    slots=(Slot("question", keyword=True), Slot("statements", keyword=True, style="numbered")),
    response=InsightsResponse,
    answer_format=(
        '{"insights": [{"insight": "<insight>", "evidence": [<statement numbers>]}, ...]}'
    ),
    modifier="read",
    check=_check_insights,
    narrow=narrow_insights,
    max_tokens=400,
    tolerance=(SimilarText("insights"),),
)

MEMORY_SUMMARY = Template(
    category="memory summary",
    group="memory summary",
    body=(
        "Statements:\n{statements}\n\n"
        "Based on the statements above and what you know about {name}, summarise {name}'s core "
        "characteristics, current daily occupation and recent progress in 2 to 4 sentences."
    ),
    slots=(Slot("statements", keyword=True, style="numbered"),),
    response=SummaryResponse,
    answer_format='{"summary": "<2 to 4 sentences>"}',
    modifier="read",
    max_tokens=160,
    tolerance=(SimilarText("summary"),),
)

ACTOR_STATUS = Template(
    category="new actor statuses",
    group="new actor statuses",
    body=(
        "{name} is {activity}, using the {actor} in {area}. In a few words, what is the new "
        "status of the {actor}?\n"
        "Actor: {actor}"
    ),
    slots=(Slot("actor", keyword=True), Slot("activity", keyword=True), Slot("area")),
    response=StatusResponse,
    answer_format='{"status": "<a short phrase, e.g. being used to make coffee>"}',
    modifier="read",
    max_tokens=48,
    tolerance=(SameStatus("status"),),
)

AGENT_REACTION = Template(
    category="agent reaction",
    group="dialogue",
    body=(
        "{name} is currently {current}.\n"
        "{name} sees {other}, who is {other_status}.\n"
        "What {name} remembers about {other}:\n{memories}\n\n"
        "How does {name} react? Pick one option exactly as written, then say what {name} will do "
        f"and for how many minutes ({_MINUTES}).\n"
        "Options (JSON list): {options}"
    ),
    slots=(
        Slot("current", keyword=True),
        Slot("other", keyword=True),
        Slot("other_status", keyword=True),
        Slot("memories", style="numbered"),
        Slot("options", style="json"),
    ),
    response=AgentReactionResponse,
    answer_format=(
        '{"choice": "<one of the options>", '
        '"activity": "<what {name} will be doing, e.g. making tea>", '
        f'"minutes": <{_MINUTES}>}}'
    ),
    modifier=None,
    check=_check_choice,
    narrow=narrow_choice,
    max_tokens=96,
    tolerance=(SameReaction("choice"),),
)

RELATIONSHIP = Template(
    category="relationship summary",
    group="dialogue",
    body=(
        "Statements:\n{statements}\n\n"
        "In one or two sentences, summarise the relationship between {name} and {other}.\n"
        "Other: {other}"
    ),
    slots=(Slot("other", keyword=True), Slot("statements", keyword=True, style="numbered")),
    response=SummaryResponse,
    answer_format='{"summary": "<one or two sentences>"}',
    modifier=None,
    max_tokens=128,
    tolerance=(SimilarText("summary"),),
)

UTTERANCE = Template(
    category="dialogue utterance",
    group="dialogue",
    body=(
        "{name} is talking with {other} at {place}.\n"
        "{name}'s view of {other}: {relationship}\n"
        "{name} is currently {current}.\n"
        "Conversation so far:\n{transcript}\n"
        "Utterances so far: {count} of at most 20.\n"
        "What does {name} say next? Set end_conversation to true if this ends the conversation."
    ),
    slots=(
        Slot("other", keyword=True),
        Slot("place"),
        Slot("relationship"),
        Slot("current"),
        Slot("transcript", keyword=True, style="lines"),
        Slot("count"),
    ),
    response=UtteranceResponse,
    answer_format='{"utterance": "<what {name} says>", "end_conversation": <true or false>}',
    modifier=None,
    max_tokens=96,
    tolerance=(SimilarText("utterance"),),
)

DIALOGUE_SUMMARY = Template(
    category="dialogue summary",
    group="dialogue",
    body=(
        "Conversation between {name} and {other}:\n{transcript}\n\n"
        "Summarise the conversation in one sentence, from {name}'s point of view."
    ),
    slots=(Slot("other", keyword=True), Slot("transcript", keyword=True, style="lines")),
    response=SummaryResponse,
    answer_format='{"summary": "<one sentence>"}',
    modifier=None,
    max_tokens=96,
    tolerance=(SimilarText("summary"),),
)

TEMPLATES: tuple[Template[Any], ...] = (
    IMPORTANCE,
    INITIAL_PLAN,
    DECOMPOSITION,
    REVISION,
    FINDING_LOCATION,
    ACTOR_REACTION,
    QUESTIONS,
    INSIGHTS,
    MEMORY_SUMMARY,
    ACTOR_STATUS,
    AGENT_REACTION,
    RELATIONSHIP,
    UTTERANCE,
    DIALOGUE_SUMMARY,
)

CATEGORIES: tuple[str, ...] = tuple(t.category for t in TEMPLATES)

_BY_CATEGORY: dict[str, Template[Any]] = {t.category: t for t in TEMPLATES}


def template(category: str) -> Template[Any]:
    """The template of a category; ``KeyError`` names the known ones."""
    try:
        return _BY_CATEGORY[category]
    except KeyError:
        raise KeyError(f"unknown category {category!r}; known: {list(CATEGORIES)}") from None
