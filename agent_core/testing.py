"""ScriptedLLM: a deterministic, OpenAI-compatible stand-in for a model that plays the town.

``ScriptedLLM().chat.completions.create(**kwargs)`` returns a real
``openai.types.chat.ChatCompletion`` (with usage). It answers from the request's
``response_format``: the JSON schema the town sends with each query says what a valid answer
is -- this query's places and options as enums, a schedule's times as alternatives that are
valid by construction, item counts, number ranges, text lengths -- and the double writes one
instance of it, as a model under constrained decoding would. It never reads the prompt's prose,
so rewording a prompt cannot change what it can answer; the request only seeds its choices, so
identical requests get identical answers, like a model at temperature 0.

A revision (the ``revise`` modifier) shows the model a cached answer to rewrite. The double
finds it as data, not by its wording: the JSON object in the request that is a valid answer of
the category's response model. It then keeps what the query's schema allows of it: the same
item count, times and activities where the schema offers them, the nearest option, place and
time where it does not.

Free text gets short stock phrases chosen by field name. A request without a JSON schema gets
prose. A request with a template's plain schema (``--template-schemas``) gets an answer of that
shape, which the query's own rules (places, options, windows) may refuse, as they refuse an
unconstrained model's.

Knobs: ``malformed_rate`` makes that fraction of answers invalid (prose, truncated JSON, wrong
keys, values outside the schema) so retry paths run; ``messy_rate`` makes answers valid only
after lenient parsing (code fences, prose around the JSON, numbers and booleans as strings).
Requests for a model in ``reliable_models`` (the superior model) are never malformed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from openai.types.chat import ChatCompletion

from .clock import hhmm, parse_hhmm
from .plans import TIME_PATTERN
from .rules import ReactionOptions, keeps_on
from .templates import CATEGORIES, category_of_schema_name, template

__all__ = ["ScriptedLLM"]

# How likely each of a reaction's options is, by what it means (continue, engage, go
# elsewhere), whatever order the prompt lists them in: agents mostly carry on with what they
# do, and often talk to someone they meet.
_CHOICE_WEIGHTS: dict[str, tuple[float, ...]] = {
    "actor reaction": (0.6, 0.25, 0.15),
    "agent reaction": (0.4, 0.45, 0.15),
}


def _meaning(option: str) -> int:
    """A reaction option's place in ``_CHOICE_WEIGHTS``: continue, engage, go elsewhere."""
    if keeps_on(option):
        return 0
    return 2 if option == ReactionOptions.leave else 1


# How often a schedule item is at the first of its places: the town lists the places an agent
# knows in the order it learnt them, home first, and most of a day happens at home.
_HOME_BIAS = 0.7

# Stock phrases for free text, by the field's name in the schema.
_PHRASES: dict[str, tuple[str, ...]] = {
    "activity": (
        "reading a book",
        "tidying up",
        "having a meal",
        "working on a project",
        "taking a walk",
        "catching up on messages",
        "studying",
        "resting for a while",
    ),
    "location": ("home",),
    "choice": ("carry on",),
    "summary": (
        "A friendly resident who keeps to a daily routine and looks out for the neighbours.",
        "A thoughtful person, busy with work and home, who enjoys a good conversation.",
    ),
    "status": ("being used", "in use"),
    "insight": (
        "Keeps a steady routine.",
        "Values time with the people nearby.",
        "Finds meaning in everyday work.",
        "Likes to plan ahead.",
        "Notices small changes around the house.",
    ),
    "questions": (
        "What matters most to them these days?",
        "Who do they spend their time with?",
        "What are they working towards?",
        "How do they like to spend a free hour?",
    ),
    "utterance": (
        "Hi, how is your day going?",
        "I have been busy today.",
        "That sounds interesting, tell me more.",
        "Have you been to the park lately?",
        "I should get going soon.",
        "It was nice talking to you!",
    ),
}

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "be",
        "his",
        "her",
        "their",
        "its",
        "into",
        "up",
        "out",
        "go",
        "going",
        "do",
        "doing",
        "some",
        "somewhere",
    }
)
_NO_HINT = object()
_FAR = 1e6  # the distance of a hint the schema cannot hold at all


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _minutes(value: Any) -> int | None:
    """The minute of day of an ``"HH:MM"`` string, else ``None``."""
    if isinstance(value, str) and re.fullmatch(TIME_PATTERN, value):
        return parse_hhmm(value)
    return None


class _Writer:
    """Writes one instance of a JSON schema, as close to a ``hint`` (an earlier answer) as the
    schema allows; what the hint does not decide, ``rng`` does."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, category: str) -> None:
        self.root = root
        self.rng = rng
        self.weights = _CHOICE_WEIGHTS.get(category)
        self.used: dict[str, set[str]] = {}
        self.clock = 8 * 60  # the next time a plain (unnarrowed) time field gets
        self.depth = 0  # arrays being written around the current value

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            node = self.root["$defs"][str(node["$ref"]).rsplit("/", 1)[-1]]
        return node

    # -- how far a hint is from what a schema node allows ---------------------------------------

    def distance(self, node: Mapping[str, Any], hint: Any) -> float:
        node = self.resolve(node)
        if "anyOf" in node:
            return min(self.distance(alt, hint) for alt in node["anyOf"])
        values = [node["const"]] if "const" in node else node.get("enum")
        if values is not None:
            if hint in values:
                return 0.0
            wanted = _minutes(hint)
            times = [m for m in map(_minutes, values) if m is not None]
            return min(abs(m - wanted) for m in times) / 60 if wanted is not None and times else 1
        kind = node.get("type")
        if kind == "object":
            if not isinstance(hint, dict):
                return _FAR
            props = node.get("properties", {})
            return sum(self.distance(sub, hint[k]) for k, sub in props.items() if k in hint)
        if kind == "array":
            if not isinstance(hint, list):
                return _FAR
            if "prefixItems" in node:
                items = list(node["prefixItems"])
                missing = abs(len(items) - len(hint)) * _FAR
                return missing + sum(self.distance(i, h) for i, h in zip(items, hint, strict=False))
            lo, hi = node.get("minItems", 0), node.get("maxItems", len(hint))
            return 0.0 if lo <= len(hint) <= hi else _FAR
        return 0.0

    # -- writing --------------------------------------------------------------------------------

    def value(self, node: Mapping[str, Any], hint: Any = _NO_HINT, field: str = "") -> Any:
        node = self.resolve(node)
        if "anyOf" in node:
            alternatives = list(node["anyOf"])
            if hint is _NO_HINT:
                chosen = self.rng.choice(alternatives)
            else:
                chosen = min(alternatives, key=lambda alt: self.distance(alt, hint))
            return self.value(chosen, hint, field)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return self.member(list(node["enum"]), hint, field)
        kind = node.get("type")
        if kind == "object":
            given = hint if isinstance(hint, dict) else {}
            return {
                k: self.value(sub, given.get(k, _NO_HINT), k)
                for k, sub in node.get("properties", {}).items()
            }
        if kind == "array":
            return self.array(node, hint, field)
        if kind == "string":
            return self.text(node, hint, field)
        if kind in ("integer", "number"):
            return self.number(node, hint)
        if kind == "boolean":
            return hint if isinstance(hint, bool) else self.rng.random() < 0.2
        return None

    def member(self, values: list[Any], hint: Any, field: str) -> Any:
        if hint is _NO_HINT:
            if field == "choice" and self.weights and len(self.weights) == len(values):
                weights = [self.weights[_meaning(v)] for v in values]
                return self.rng.choices(values, weights=weights)[0]
            if field == "location" and self.depth and self.rng.random() < _HOME_BIAS:
                return values[0]
            return self.rng.choice(values)
        if hint in values:
            return hint
        wanted = _minutes(hint)
        if wanted is not None and all(_minutes(v) is not None for v in values):
            return min(values, key=lambda v: abs((_minutes(v) or 0) - wanted))
        # The option sharing most words with the hint; ties broken by the seed.
        words = _words(str(hint))
        scores = [len(words & _words(str(v))) for v in values]
        top = max(scores)
        return self.rng.choice([v for v, s in zip(values, scores, strict=True) if s == top])

    def array(self, node: Mapping[str, Any], hint: Any, field: str) -> list[Any]:
        given = hint if isinstance(hint, list) else []
        if "prefixItems" in node:
            items = list(node["prefixItems"])
        else:
            lo = int(node.get("minItems", 0))
            hi = int(node.get("maxItems", lo + 3))
            n = min(max(len(given), lo), hi) if given else self.rng.randint(lo, hi)
            item = self.resolve(node.get("items", {}))
            if not given and item.get("type") == "integer" and "maximum" in item:
                # Distinct numbers in order, as statement numbers are cited.
                pool = range(int(item.get("minimum", 0)), int(item["maximum"]) + 1)
                return sorted(self.rng.sample(pool, min(n, len(pool))))
            items = [item] * n
        self.depth += 1
        try:
            return [
                self.value(item, given[i] if i < len(given) else _NO_HINT, field)
                for i, item in enumerate(items)
            ]
        finally:
            self.depth -= 1

    def text(self, node: Mapping[str, Any], hint: Any, field: str) -> str:
        longest = int(node.get("maxLength", 200))
        pattern = node.get("pattern")
        if isinstance(hint, str) and hint.strip():
            cut = hint[:longest]
            if pattern is None or re.fullmatch(pattern, cut):
                return cut
        if pattern == TIME_PATTERN:
            # A schedule whose times the schema does not narrow: items an hour each, in order.
            minute, self.clock = self.clock, min(24 * 60, self.clock + 60)
            return hhmm(minute)
        phrases = _PHRASES.get(field, ("ok",))
        used = self.used.setdefault(field, set())
        fresh = [p for p in phrases if p not in used] or list(phrases)
        phrase = self.rng.choice(fresh)
        used.add(phrase)
        return phrase[:longest] or "ok"

    def number(self, node: Mapping[str, Any], hint: Any) -> int | float:
        lo = float(node.get("minimum", 0))
        hi = float(node.get("maximum", lo + 10))
        integer = node.get("type") == "integer"
        if isinstance(hint, int | float) and not isinstance(hint, bool):
            kept = min(max(float(hint), lo), hi)
            return round(kept) if integer else kept
        # Leaning low: most memories are mundane, most reactions short.
        value = lo + (hi - lo) * self.rng.random() ** 3
        return round(value) if integer else value


def _earlier_answer(category: str, messages: Sequence[Mapping[str, Any]]) -> Any:
    """The cached answer a revision request shows: the first JSON object in the request that
    is a valid answer of the category's response model (``None`` if there is none, or the
    category does not revise)."""
    if category not in CATEGORIES or template(category).modifier != "revise":
        return None
    response = template(category).response
    decoder = json.JSONDecoder()
    for message in messages:
        text = str(message.get("content") or "")
        start = text.find("{")
        while start >= 0:
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                start = text.find("{", start + 1)
                continue
            if isinstance(value, dict):
                try:
                    response.model_validate(value)
                except ValueError:
                    pass
                else:
                    return value
            start = text.find("{", end)
    return None


def _violation(node: Mapping[str, Any], answer: Any, writer: _Writer) -> Any:
    """``answer`` with one leaf value the schema forbids (a number past its maximum, a string
    outside its enum), or ``_NO_HINT`` if it has no such leaf."""
    node = writer.resolve(node)
    if "anyOf" in node:
        alt = min(node["anyOf"], key=lambda a: writer.distance(a, answer))
        return _violation(alt, answer, writer)
    if "enum" in node or "const" in node:
        return "somewhere that is not an option"
    kind = node.get("type")
    if kind == "integer" and "maximum" in node:
        return int(node["maximum"]) + 1
    if kind == "object" and isinstance(answer, dict):
        for key, sub in node.get("properties", {}).items():
            if key in answer:
                bad = _violation(sub, answer[key], writer)
                if bad is not _NO_HINT:
                    return {**answer, key: bad}
    if kind == "array" and isinstance(answer, list):
        items = node.get("prefixItems") or [node.get("items", {})] * len(answer)
        for i, (sub, value) in enumerate(zip(items, answer, strict=False)):
            bad = _violation(sub, value, writer)
            if bad is not _NO_HINT:
                return [*answer[:i], bad, *answer[i + 1 :]]
        if node.get("minItems", 0) > 0:
            return []
    return _NO_HINT


def _corrupt(answer: Any, schema: Mapping[str, Any], rng: random.Random) -> str:
    """An invalid answer of one of the kinds small models produce."""
    text = json.dumps(answer)
    kind = rng.choice(["prose", "truncated", "wrong_key", "out_of_range"])
    if kind == "prose":
        return "I think that depends on many things."
    if kind == "truncated":
        return text[: max(1, len(text) // 2)]
    if kind == "out_of_range":
        bad = _violation(schema, answer, _Writer(schema, rng, ""))
        if bad is not _NO_HINT:
            return json.dumps(bad)
    return json.dumps({"answer": answer})


def _messy(answer: dict[str, Any], rng: random.Random) -> str:
    """A valid answer in a shape only lenient parsing accepts."""
    kind = rng.choice(["fence", "prose", "strings"])
    if kind == "fence":
        return f"```json\n{json.dumps(answer, indent=2)}\n```"
    if kind == "prose":
        return f"Sure! Here is my answer: {json.dumps(answer)} Let me know if you need more."

    def stringify(value: Any) -> Any:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, dict):
            return {k: stringify(v) for k, v in value.items()}
        if isinstance(value, list):
            return [stringify(v) for v in value]
        return value

    return json.dumps(stringify(answer))


def _json_schema(response_format: Any) -> tuple[str | None, dict[str, Any] | None]:
    """The category (the schema's name) and the JSON schema of a ``response_format``."""
    if isinstance(response_format, dict):
        spec = response_format.get("json_schema")
        if isinstance(spec, dict) and spec.get("name"):
            schema = spec.get("schema")
            return category_of_schema_name(str(spec["name"])), (
                schema if isinstance(schema, dict) else None
            )
    return None, None


class _Completions:
    def __init__(self, owner: ScriptedLLM) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> ChatCompletion:
        return self._owner.answer(kwargs)


class _Chat:
    def __init__(self, owner: ScriptedLLM) -> None:
        self.completions = _Completions(owner)


class ScriptedLLM:
    """See the module docstring. ``requests`` counts requests per category (resubmissions and
    revisions included), ``malformed`` the invalid answers given, ``revisions`` the revision
    requests answered (those that showed an earlier answer)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        malformed_rate: float = 0.0,
        messy_rate: float = 0.0,
        reliable_models: Iterable[str] = ("gpt-4o",),
    ) -> None:
        if not 0.0 <= malformed_rate <= 1.0 or not 0.0 <= messy_rate <= 1.0:
            raise ValueError("rates must lie in [0, 1]")
        self.seed = seed
        self.malformed_rate = malformed_rate
        self.messy_rate = messy_rate
        self.reliable_models = frozenset(reliable_models)
        self.chat = _Chat(self)
        self.requests: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.revisions: Counter[str] = Counter()
        # Faults follow the sequence of requests, so a resubmission of the same prompt can
        # succeed where the first attempt failed, as with a real model at temperature > 0.
        self._faults = random.Random(f"faults:{seed}")
        self._lock = threading.Lock()
        self._ids = 0
        # Attributes code commonly reads off a real client.
        self.api_key = "scripted"
        self.base_url = "scripted://local"

    def answer(self, kwargs: dict[str, Any]) -> ChatCompletion:
        messages: list[dict[str, Any]] = list(kwargs.get("messages") or [])
        model = str(kwargs.get("model", "scripted"))
        category, schema = _json_schema(kwargs.get("response_format"))
        label = category or "?"
        digest = hashlib.sha256(
            json.dumps(
                [self.seed, category, messages, schema], sort_keys=True, default=str
            ).encode()
        ).hexdigest()
        rng = random.Random(digest)
        earlier = _earlier_answer(category, messages) if category else None
        with self._lock:
            self._ids += 1
            n = self._ids
            self.requests[label] += 1
            if earlier is not None:
                self.revisions[label] += 1
            fault = self._faults.random()
            mess = self._faults.random()
            fault_rng = random.Random(self._faults.random())
        if schema is None:
            content = "I can only answer requests that carry a JSON schema."
        else:
            writer = _Writer(schema, rng, label)
            answer = writer.value(schema, _NO_HINT if earlier is None else earlier)
            if model not in self.reliable_models and fault < self.malformed_rate:
                with self._lock:
                    self.malformed[label] += 1
                content = _corrupt(answer, schema, fault_rng)
            elif mess < self.messy_rate:
                content = _messy(answer, fault_rng)
            else:
                content = json.dumps(answer, ensure_ascii=False)
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        return ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-scripted-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )
