"""ScriptedLLM: a deterministic, OpenAI-compatible stand-in for a model that plays the town.

``ScriptedLLM().chat.completions.create(**kwargs)`` returns a real
``openai.types.chat.ChatCompletion`` (with usage). It reads the category from the request's
``response_format`` (the json_schema name) and answers from the prompt itself: it picks among
the prompt's own options, places and statements and builds plans from the agent's routine in
the summary block. Revision prompts get real revisions (only locations changed; timestamps
moved into the new window; the most similar option picked). Answers depend only on the
request and the seed, so identical prompts get identical answers, like a model at
temperature 0.

Knobs: ``malformed_rate`` makes that fraction of answers invalid (prose, truncated JSON, wrong
keys, out-of-range values) so retry paths run; ``messy_rate`` makes answers valid only after
lenient parsing (code fences, prose around the JSON, numbers and booleans as strings). Requests
for a model in ``reliable_models`` (the superior model) are never malformed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from openai.types.chat import ChatCompletion

from .clock import parse_hhmm
from .plans import PlanItem, fit_to_window, split_window
from .revise import REVISION_MARKER
from .templates import category_of_schema_name

__all__ = ["ScriptedLLM", "gerund"]

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
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def gerund(phrase: str) -> str:
    """``"attend classes"`` → ``"attending classes"``: activities read as what someone is
    doing ("Alice Wilson is attending classes")."""
    words = phrase.strip().split()
    if not words:
        return phrase
    verb = words[0].lower()
    if verb.endswith("ing"):
        return phrase.strip()
    if verb.endswith("ie"):
        verb = verb[:-2] + "ying"
    elif verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")) and len(verb) > 2:
        verb = verb[:-1] + "ing"
    elif (
        len(verb) == 3
        and verb[2] not in "aeiouwxy"
        and verb[1] in "aeiou"
        and verb[0] not in "aeiou"
    ):
        verb = verb + verb[2] + "ing"  # run → running, sit → sitting
    else:
        verb = verb + "ing"
    return " ".join([verb, *words[1:]])


class _Prompt:
    """The parts of a rendered prompt the answers are drawn from."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        system = next(
            (str(m.get("content", "")) for m in messages if m.get("role") == "system"), ""
        )
        self.text = "\n".join(
            str(m.get("content", "")) for m in messages if m.get("role") == "user"
        )
        found = re.search(r"You simulate (.+?), a resident", system)
        self.name = found.group(1) if found else "Someone"
        self.first = self.name.split()[0]
        self.revision = REVISION_MARKER in self.text

    def line(self, label: str) -> str | None:
        found = re.search(rf"^{re.escape(label)}:[ \t]*(.*)$", self.text, re.MULTILINE)
        return found.group(1).strip() if found else None

    def json_line(self, label: str) -> Any:
        value = self.line(label)
        return json.loads(value) if value else None

    def numbered(self) -> list[str]:
        return re.findall(r"^\d+\. (.*)$", self.text, re.MULTILINE)

    def window(self) -> tuple[int, int] | None:
        value = self.line("Time window")
        if not value:
            return None
        start, _, end = value.partition(" to ")
        return parse_hhmm(start), parse_hhmm(end)

    def earlier(self) -> Any:
        return self.json_line(REVISION_MARKER[:-1])


def _best(query: str, options: Sequence[str], rng: random.Random) -> str:
    """The option sharing most words with ``query``; ties broken by ``rng``."""
    words = _words(query)
    scores = [len(words & _words(o)) for o in options]
    top = max(scores)
    return rng.choice([o for o, s in zip(options, scores, strict=True) if s == top])


def _place(activity: str, places: Sequence[str], rng: random.Random, home: str) -> str:
    words = _words(activity)
    scored = [(len(words & _words(p)), p) for p in places]
    best = max(scored)[0]
    if best > 0:
        return next(p for s, p in scored if s == best)
    return home if rng.random() < 0.7 or len(places) == 1 else rng.choice(list(places))


def _map_location(location: str, places: Sequence[str], rng: random.Random) -> str:
    if location in places:
        return location
    return _best(location, places, rng) if places else location


_WORKDAY_WORDS = ("class", "shift", "teach", "school", "work a", "gardening club")


class _Answers:
    """One method per category: a valid answer as a JSON-able dict."""

    def __init__(self, prompt: _Prompt, rng: random.Random) -> None:
        self.p = prompt
        self.rng = rng

    # -- importance -----------------------------------------------------------------------------

    def importance_score(self) -> dict[str, Any]:
        memory = (self.p.line("Memory") or "").lower()
        if any(w in memory for w in (" idle", "sleeping", "short break")):
            score = self.rng.randint(1, 2)
        elif any(w in memory for w in ("talk", "plan", "decided", "conversation")):
            score = self.rng.randint(4, 8)
        else:
            score = self.rng.randint(2, 6)
        return {"score": score}

    # -- plans ----------------------------------------------------------------------------------

    def initial_plan_generation(self) -> dict[str, Any]:
        places: list[str] = self.p.json_line("Places (JSON list)") or []
        if self.p.revision:
            plans = self.p.earlier()["plans"]
            for plan in plans:
                plan["location"] = _map_location(plan["location"], places, self.rng)
            return {"plans": plans}
        home = places[0]
        routine = [r for r in (self.p.line("Daily routine") or "").split("; ") if r]
        weekend = (self.p.line("Day of the week") or "") in ("Saturday", "Sunday")
        if weekend:
            routine = [r for r in routine if not any(w in r for w in _WORKDAY_WORDS)]
            routine += [f"spend time at {p}" for p in places[1:3]] or ["rest at home"]
        n = self.rng.randint(5, 7)
        start = self.rng.choice([390, 420, 450, 480])
        end = self.rng.choice([1290, 1320, 1350, 1380])
        spans = split_window(start, end, n)
        middle = [self.rng.choice(routine or ["read a book"]) for _ in range(n - 2)]
        activities = ["waking up and getting ready", *map(gerund, middle), "relaxing before bed"]
        plans = []
        for (s, e), activity in zip(spans, activities, strict=True):
            fixed = activity in (activities[0], activities[-1])
            location = home if fixed else _place(activity, places, self.rng, home)
            plans.append(
                PlanItem(
                    start=f"{s // 60}:{s % 60:02d}",
                    end=f"{e // 60}:{e % 60:02d}",
                    activity=activity,
                    location=location,
                ).model_dump()
            )
        return {"plans": plans}

    def plan_decomposition(self) -> dict[str, Any]:
        places: list[str] = self.p.json_line("Places (JSON list)") or []
        window = self.p.window()
        assert window is not None, "a decomposition prompt states its time window"
        start, end = window
        if self.p.revision:
            earlier = self.p.earlier()["tasks"]
            activities = [t["activity"] for t in earlier]
            locations = [_map_location(t["location"], places, self.rng) for t in earlier]
        else:
            activity = self.p.line("Plan") or "keeping busy"
            location = _map_location(self.p.line("Location") or "", places, self.rng)
            parts = 3 if end - start >= 120 and self.rng.random() < 0.5 else 2
            stages = ["getting started with", "continuing", "wrapping up"]
            if parts == 2:
                stages = [stages[0], stages[2]]
            activities = [f"{stage} {activity}" for stage in stages]
            locations = [location] * parts
        parts = len(activities) if end - start >= 30 * len(activities) else 2
        spans = split_window(start, end, parts)
        return {
            "tasks": [
                {"start": _hm(s), "end": _hm(e), "activity": a, "location": loc}
                for (s, e), a, loc in zip(spans, activities, locations, strict=False)
            ]
        }

    def future_plan_revision(self) -> dict[str, Any]:
        places: list[str] = self.p.json_line("Places (JSON list)") or []
        window = self.p.window()
        assert window is not None, "a revision prompt states its time window"
        start, end = window
        if self.p.revision:
            items = [PlanItem.model_validate(p) for p in self.p.earlier()["plans"]]
            if items:
                # Move the earlier plan so that it starts when the new window does.
                shift = start - items[0].start_min
                items = [
                    p.model_copy(
                        update={
                            "start": _hm(max(0, min(1440, p.start_min + shift))),
                            "end": _hm(max(0, min(1440, p.end_min + shift))),
                        }
                    )
                    for p in items
                ]
        else:
            items = [PlanItem.model_validate(p) for p in self.p.json_line("Remaining plans (JSON)")]
        fitted = fit_to_window(items, start, end, min_minutes=30)
        return {
            "plans": [
                {**p.model_dump(), "location": _map_location(p.location, places, self.rng)}
                for p in fitted
            ]
        }

    # -- choices --------------------------------------------------------------------------------

    def finding_location(self) -> dict[str, Any]:
        options: list[str] = self.p.json_line("Options (JSON list)")
        return {"location": _best(self.p.line("Task") or "", options, self.rng)}

    def _current(self) -> str:
        found = re.search(r"is currently (.*)\.$", self.p.text, re.MULTILINE)
        if found:
            return found.group(1)
        found = re.search(r"Now .+? is (.*?) and notices", self.p.text)
        return found.group(1) if found else "what they were doing"

    def _react(self, weights: Sequence[float], elsewhere: Sequence[str]) -> dict[str, Any]:
        options: list[str] = self.p.json_line("Options (JSON list)")
        minutes = self.rng.choice([20, 30, 40, 60])
        if self.p.revision:
            earlier = self.p.earlier()
            choice = _best(earlier["choice"], options, self.rng)
            index = options.index(choice)
            activity = self._current() if index == 0 else earlier["activity"]
            return {"choice": choice, "activity": activity, "minutes": earlier["minutes"]}
        index = self.rng.choices(range(len(options)), weights=weights)[0]
        choice = options[index]
        if index == 0:
            activity = self._current()
        elif choice.startswith("use the "):
            activity = f"using the {choice[len('use the ') :]}"
        elif choice.startswith("talk to "):
            activity = f"chatting with {choice[len('talk to ') :]}"
        else:
            activity = self.rng.choice(list(elsewhere))
        return {"choice": choice, "activity": activity, "minutes": minutes}

    def actor_reaction(self) -> dict[str, Any]:
        return self._react((0.6, 0.25, 0.15), ("going for a short walk", "getting some fresh air"))

    def agent_reaction(self) -> dict[str, Any]:
        return self._react((0.4, 0.45, 0.15), ("heading somewhere quieter", "running an errand"))

    # -- reflection and summaries ---------------------------------------------------------------

    def high_level_questions(self) -> dict[str, Any]:
        statements = self.p.numbered() or [f"{self.p.name} lives in town"]
        picks = [self.rng.choice(statements) for _ in range(3)]
        return {
            "questions": [
                f"What does {self.p.first} care about regarding {' '.join(s.split()[:6])}?"
                for s in picks
            ]
        }

    def high_level_insights(self) -> dict[str, Any]:
        statements = self.p.numbered()
        n = max(1, len(statements))
        insights = []
        for _ in range(5):
            evidence = sorted(self.rng.sample(range(1, n + 1), k=min(n, self.rng.randint(1, 3))))
            basis = statements[evidence[0] - 1] if statements else self.p.name
            insights.append(
                {
                    "insight": f"{self.p.first} pays attention to this: {basis}",
                    "evidence": evidence,
                }
            )
        return {"insights": insights}

    def memory_summary(self) -> dict[str, Any]:
        traits = (self.p.line("Innate traits") or "thoughtful").lower()
        statements = self.p.numbered()
        recent = f" Recently: {statements[0].rstrip('.')}." if statements else ""
        return {"summary": f"{self.p.name} is {traits}.{recent}"}

    def new_actor_statuses(self) -> dict[str, Any]:
        found = re.search(r"is (.*), using the (.+?) in ", self.p.text)
        activity = found.group(1) if found else "something"
        if activity == "sleeping":
            return {"status": f"being slept in by {self.p.first}"}
        return {"status": f"being used for {activity}"[:100]}

    # -- dialogue -------------------------------------------------------------------------------

    def relationship_summary(self) -> dict[str, Any]:
        other = self.p.line("Other") or "someone"
        known = len(self.p.numbered())
        return {
            "summary": f"{self.p.name} knows {other}; {self.p.first} remembers {known} things "
            f"about them."
        }

    def dialogue_utterance(self) -> dict[str, Any]:
        said = int((self.p.line("Utterances so far") or "0").split()[0])
        found = re.search(r"is talking with (.+?) at ", self.p.text)
        other = (found.group(1) if found else "there").split()[0]
        lines = [
            f"Hi {other}, how is your day going?",
            f"I have been busy today, {other}.",
            "That sounds interesting, tell me more.",
            f"By the way, {other}, have you been to the park lately?",
            "I should get going soon.",
            "It was nice talking to you!",
        ]
        end = said >= 2 and self.rng.random() < 0.1 + 0.08 * said
        return {"utterance": self.rng.choice(lines), "end_conversation": end}

    def dialogue_summary(self) -> dict[str, Any]:
        found = re.search(r"Conversation between .+? and (.+?):", self.p.text)
        other = found.group(1) if found else "someone"
        return {"summary": f"{self.p.name} had a friendly chat with {other}."}


def _hm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _corrupt(category: str, answer: dict[str, Any], rng: random.Random) -> str:
    """An invalid answer of one of the kinds small models produce."""
    text = json.dumps(answer)
    kind = rng.choice(["prose", "truncated", "wrong_key", "out_of_range"])
    if kind == "prose":
        return "I think that depends on many things."
    if kind == "truncated":
        return text[: max(1, len(text) // 2)]
    if kind == "out_of_range":
        if category == "importance score":
            return json.dumps({"score": 11})
        for key, value in answer.items():
            if isinstance(value, list):
                return json.dumps({**answer, key: []} if key != "plans" else {key: value[:1]})
            if key in ("location", "choice"):
                return json.dumps({**answer, key: "somewhere that is not an option"})
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
    prompts answered."""

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
        category = _category(kwargs.get("response_format"))
        digest = hashlib.sha256(
            json.dumps([self.seed, category, messages], sort_keys=True, default=str).encode()
        ).hexdigest()
        rng = random.Random(digest)
        prompt = _Prompt(messages)
        method: Callable[[], dict[str, Any]] | None = getattr(
            _Answers(prompt, rng), (category or "").replace(" ", "_").replace("-", "_"), None
        )
        with self._lock:
            self._ids += 1
            n = self._ids
            self.requests[category or "?"] += 1
            if prompt.revision:
                self.revisions[category or "?"] += 1
            fault = self._faults.random()
            mess = self._faults.random()
            fault_rng = random.Random(self._faults.random())
        if method is None:
            content = "I can only answer the town's prompts."
        else:
            answer = method()
            if model not in self.reliable_models and fault < self.malformed_rate:
                with self._lock:
                    self.malformed[category or "?"] += 1
                content = _corrupt(category or "", answer, fault_rng)
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


def _category(response_format: Any) -> str | None:
    if isinstance(response_format, dict):
        schema = response_format.get("json_schema")
        if isinstance(schema, dict) and schema.get("name"):
            return category_of_schema_name(str(schema["name"]))
    return None
