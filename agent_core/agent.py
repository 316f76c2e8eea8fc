"""One generative agent: perceive, remember, plan, act, react, talk and reflect.

The loop follows Park et al. (2023) as the study used it:

- each morning a memory summary refreshes the agent's self-description and an *initial plan*
  lays out the day's activities at places the agent knows;
- a plan item is *decomposed* a few hours ahead into a few contiguous tasks;
  each task is placed by *finding location* (area, then object) and sets its object's status
  (*new actor statuses*);
- every step the agent perceives up to ``attention_bandwidth`` new events around it; each becomes
  a memory with an LLM *importance* score; the observed actors join its personal tree;
- an event may trigger an *actor reaction* (continue / use the actor / go elsewhere) or, for
  another agent, an *agent reaction* (continue / talk / go elsewhere); a reaction that changes
  what the agent does triggers a *future plan revision*;
- dialogue: relationship summaries, up to 20 utterances, and a dialogue summary per side;
- when the importance of new memories exceeds a threshold: *reflection* (questions, retrieval
  per question, insights each, citing evidence).

How many items, how long and within which window: :mod:`agent_core.rules`.

Every LLM answer may be missing (no valid answer could be had); each call site then falls back
to a plain deterministic choice, so one bad answer never stops a run.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .call import TownCall, town_call
from .clock import MINUTES_PER_DAY, Clock, hhmm
from .config import SimConfig
from .memory import EmbeddingMemo, MemoryKind, MemoryStream
from .persona import AgentSeed
from .plans import PlanItem, fit_to_window, split_window
from .rules import (
    DAY_WINDOW,
    DECOMPOSITION_RULE,
    INITIAL_PLAN_RULE,
    REVISION_RULE,
    ReactionOptions,
)
from .templates import (
    ACTOR_REACTION,
    ACTOR_STATUS,
    AGENT_REACTION,
    DECOMPOSITION,
    DIALOGUE_SUMMARY,
    FINDING_LOCATION,
    IMPORTANCE,
    INITIAL_PLAN,
    INSIGHTS,
    MEMORY_SUMMARY,
    QUESTIONS,
    RELATIONSHIP,
    REVISION,
    UTTERANCE,
    Requirements,
    SlotValue,
    Template,
)
from .world import IDLE, PersonalTree, World

if TYPE_CHECKING:
    from .llm import TownLLM

__all__ = ["Agent", "Event", "Task", "converse"]

logger = logging.getLogger("agent_core")

DEFAULT_IMPORTANCE = 3  # when no valid importance answer could be had
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _newest_within(texts: list[str], budget: int) -> list[str]:
    """The newest of ``texts`` (oldest first) whose lengths add up to at most ``budget``
    characters, oldest first; the newest one always, so a reflection has something to ask about."""
    kept: list[str] = []
    used = 0
    for text in reversed(texts):
        if kept and used + len(text) > budget:
            break
        kept.append(text)
        used += len(text)
    return kept[::-1]


@dataclass
class Task:
    """Something the agent does from ``start`` to ``end`` (simulation minutes)."""

    start: int
    end: int
    activity: str
    location: str  # a structure
    area: str | None = None
    item: str | None = None
    kind: Literal["plan", "reaction", "free", "sleep"] = "plan"


@dataclass
class DayItem:
    """An entry of today's plan, in simulation minutes, and how far it has been decomposed."""

    start: int
    end: int
    activity: str
    location: str
    decomposed_until: int


@dataclass(frozen=True)
class Event:
    """A perceived event: an item's or another agent's current status."""

    key: str  # the item's address, or "agent:<name>"
    kind: Literal["item", "agent"]
    subject: str  # the item's address or the agent's name
    description: str
    importance: int


class Town(list["Agent"]):
    """What an agent sees of the others: the agents of the run, in a fixed order."""

    def by_name(self, name: str) -> Agent:
        for agent in self:
            if agent.name == name:
                return agent
        raise KeyError(name)


class Agent:
    def __init__(
        self,
        seed: AgentSeed,
        world: World,
        clock: Clock,
        llm: TownLLM,
        embed: EmbeddingMemo,
        config: SimConfig,
        rng: random.Random,
        options_rng: random.Random | None = None,
    ) -> None:
        self.seed = seed
        self.name = seed.name
        self.world = world
        self.clock = clock
        self.llm = llm
        self.config = config
        self.rng = rng
        # A stream of its own for the order reaction options are shown in, so that showing them
        # shuffled leaves every other draw of the run as it was.
        self.options_rng = options_rng or random.Random(f"{seed.name}:options")
        self.memory = MemoryStream(embed)
        self.tree = PersonalTree(world)
        for structure in seed.seed_structures:
            self.tree.add(structure)
            self.tree.add_all(world.areas_of[structure])
        self.area = world.area_of(seed.bed)
        self.tree.add_all(world.items_of[self.area])
        self.item: str | None = seed.bed
        self.item_status: str | None = None
        self.status = "sleeping"
        self.asleep = True
        self.summary = seed.lifestyle or seed.seed_memory
        self.plan: list[DayItem] = []
        self.tasks: deque[Task] = deque()
        self.current: Task | None = None
        self.busy_until = 0
        self.planned_day = -1
        self.day_start = 0
        self.day_end = 0
        self.next_summary_at = 0
        self.importance_since_reflection = 0.0
        self.last_seen: dict[str, tuple[str, int]] = {}
        self.last_reaction: dict[str, int] = {}
        self.known_agents: set[str] = set()
        self.yesterday = "Nothing yet: today is the first day."
        self.reflections = 0
        self.conversations = 0
        self.bootstrapped = False

    # -- prompts --------------------------------------------------------------------------------

    def summary_block(self, now: int) -> str:
        """The agent summary block every prompt starts with (Park et al.'s identity set); the
        current time goes last in each prompt instead (see ``Template.render``)."""
        s = self.seed
        return (
            f"Name: {s.name} (age {s.age}, {s.gender})\n"
            f"Innate traits: {', '.join(s.innate)}\n"
            f"About {s.first_name}: {s.seed_memory}\n"
            f"Lifestyle: {s.lifestyle}\n"
            f"Daily routine: {'; '.join(s.routine)}\n"
            f"Currently: {self.summary}"
        )

    def _call(
        self,
        t: Template[Any],
        now: int,
        slots: dict[str, SlotValue],
        requirements: Requirements | None = None,
        context: dict[str, str] | None = None,
    ) -> TownCall:
        return town_call(
            t,
            agent=self.name,
            summary_block=self.summary_block(now),
            time=self.clock.describe(now),
            slots=slots,
            requirements=requirements,
            context=context,
            metadata={
                "sim_time": self.clock.iso(now),
                "sim_minute": now,
                "day": self.clock.day(now),
                "observed_actors": len(self.tree),
            },
        )

    def _ask(
        self,
        t: Template[Any],
        now: int,
        slots: dict[str, SlotValue],
        requirements: Requirements | None = None,
        context: dict[str, str] | None = None,
    ) -> Any:
        return self.llm.send(self._call(t, now, slots, requirements, context))

    # -- memory ---------------------------------------------------------------------------------

    def importance(self, description: str, now: int) -> int:
        return self.importances([description], now)[0]

    def importances(self, descriptions: Sequence[str], now: int) -> list[int]:
        """Rate several memories at once: the ratings are independent of each other, so they
        are asked together (:meth:`TownLLM.send_many`)."""
        answers = self.llm.send_many(
            [self._call(IMPORTANCE, now, {"memory": d}) for d in descriptions]
        )
        return [int(a.score) if a is not None else DEFAULT_IMPORTANCE for a in answers]

    def remember(
        self,
        kind: MemoryKind,
        description: str,
        now: int,
        *,
        subject: str = "",
        evidence: Sequence[int] = (),
        counts_for_reflection: bool = True,
    ) -> int:
        return self.remember_many(
            kind,
            [(description, subject, evidence)],
            now,
            counts_for_reflection=counts_for_reflection,
        )[0]

    def remember_many(
        self,
        kind: MemoryKind,
        memories: Sequence[tuple[str, str, Sequence[int]]],
        now: int,
        *,
        counts_for_reflection: bool = True,
    ) -> list[int]:
        """Add ``(description, subject, evidence)`` memories in order, rated together."""
        descriptions = [d for d, _, _ in memories]
        scores = self.importances(descriptions, now)
        self.memory.embed.warm(descriptions)
        for (description, subject, evidence), score in zip(memories, scores, strict=True):
            self.memory.add(kind, description, now, score, subject=subject, evidence=evidence)
            if counts_for_reflection:
                self.importance_since_reflection += score
        return scores

    def bootstrap(self, now: int) -> None:
        """Seed memories: each sentence of the seed memory becomes a scored thought."""
        self.bootstrapped = True
        sentences = [s for s in _SENTENCE.split(self.seed.seed_memory.strip()) if s]
        self.remember_many(
            "thought", [(s, "", ()) for s in sentences], now, counts_for_reflection=False
        )

    def summarize(self, now: int) -> None:
        query = f"{self.name}'s core characteristics, daily occupation and recent progress"
        nodes = self.memory.retrieve(query, now, 15)
        answer = self._ask(MEMORY_SUMMARY, now, {"statements": [m.description for m in nodes]})
        if answer is not None:
            self.summary = answer.summary
        self.next_summary_at = now + int(self.config.summary_every_hours * 60)

    def maybe_reflect(self, now: int) -> None:
        if self.importance_since_reflection <= self.config.reflection_threshold:
            return
        self.importance_since_reflection = 0.0
        self.reflections += 1
        recent = _newest_within(
            [m.description for m in self.memory.recent(self.config.reflection_recent)],
            self.config.reflection_recent_chars,
        )
        questions = self._ask(QUESTIONS, now, {"statements": recent})
        if questions is None:
            return
        for question in questions.questions:
            nodes = self.memory.retrieve(question, now, self.config.retrieve_k)
            if not nodes:
                continue
            answer = self._ask(
                INSIGHTS,
                now,
                {"question": question, "statements": [m.description for m in nodes]},
                Requirements(statements=len(nodes)),
            )
            if answer is None:
                continue
            insights = [
                (i.insight, "", [nodes[e - 1].id for e in i.evidence if 1 <= e <= len(nodes)])
                for i in answer.insights
            ]
            self.remember_many("reflection", insights, now, counts_for_reflection=False)

    # -- the day --------------------------------------------------------------------------------

    def places(self) -> list[str]:
        return self.tree.structures()

    def start_day(self, now: int) -> None:
        day = self.clock.day(now)
        self.planned_day = day
        self.day_start = day * MINUTES_PER_DAY
        if not self.bootstrapped:
            self.bootstrap(now)
        self.summarize(now)
        places = self.places()
        answer = self._ask(
            INITIAL_PLAN,
            now,
            {
                "date": self.clock.describe_date(now),
                "yesterday": self.yesterday,
                "weekday": self.clock.weekday(now),
                "places": places,
            },
            Requirements(places=places, window=DAY_WINDOW),
        )
        items: list[PlanItem] = answer.plans if answer is not None else self._fallback_day()
        self.plan = [self._day_item(p) for p in items]
        self.day_end = self.plan[-1].end if self.plan else now
        self.tasks.clear()
        outline = "; ".join(f"{p.start}-{p.end} {p.activity} at {p.location}" for p in items)
        self.remember(
            "thought", f"{self.name}'s plan for {self.clock.weekday(now)}: {outline}", now
        )
        self.yesterday = f"On {self.clock.weekday(now)}, {self.name} planned: {outline}."

    def _day_item(self, p: PlanItem) -> DayItem:
        start = self.day_start + p.start_min
        return DayItem(start, self.day_start + p.end_min, p.activity, p.location, start)

    def _fallback_day(self) -> list[PlanItem]:
        home = self.seed.home
        fewest = INITIAL_PLAN_RULE.count[0]
        activities = [*self.seed.routine[: fewest - 1], "relax at home"]
        while len(activities) < fewest:
            activities.append("take care of things at home")
        spans = split_window(8 * 60, 22 * 60, len(activities))
        return [
            PlanItem(start=hhmm(s), end=hhmm(e), activity=a, location=home)
            for (s, e), a in zip(spans, activities, strict=True)
        ]

    # -- one step -------------------------------------------------------------------------------

    def step(self, now: int, town: Town) -> None:
        if self.clock.minute_of_day(now) >= self.config.plan_hour * 60 and (
            self.planned_day != self.clock.day(now) and self.asleep
        ):
            self.start_day(now)
        if now < self.busy_until:
            return
        if self.current is not None and self.status != self.current.activity and not self.asleep:
            self.status = self.current.activity  # back from a conversation
        if self.asleep:
            if not self.plan or now < self.plan[0].start:
                return
            self.asleep = False
            self._release_item()
        if self.current is None or now >= self.current.end:
            self.advance(now)
            if self.asleep:
                return
        events = self.perceive(now, town)
        self.react(now, events, town)
        self.maybe_reflect(now)
        if now >= self.next_summary_at:
            self.summarize(now)

    def advance(self, now: int) -> None:
        """Start the next task of the plan (decomposing the plan further when needed)."""
        self._release_item()
        while True:
            while self.tasks and self.tasks[0].end <= now:
                self.tasks.popleft()
            if self.tasks:
                task = self.tasks.popleft()
                task.start = max(task.start, now)
                self.begin(task, now)
                return
            item = next((p for p in self.plan if p.end > now), None)
            if item is None:
                self.go_to_sleep(now)
                return
            if now < item.start:
                here = self.world.structure_of(self.area)
                gap = Task(now, item.start, "taking a short break", here, area=self.area)
                gap.kind = "free"
                self.current = gap
                self.status = gap.activity
                return
            if item.decomposed_until >= item.end:
                item.decomposed_until = max(now, item.start)
            self.decompose(item, max(item.decomposed_until, now), now)

    def decompose(self, item: DayItem, start: int, now: int) -> None:
        end = min(item.end, start + int(self.config.decompose_hours * 60))
        item.decomposed_until = end
        if end - start < DECOMPOSITION_RULE.shortest_window:
            # Too short for the fewest tasks a decomposition may have: the item is the task.
            self.tasks.append(Task(start, end, item.activity, item.location))
            return
        places = self.places()
        window = (hhmm(start - self.day_start), hhmm(end - self.day_start))
        answer = self._ask(
            DECOMPOSITION,
            now,
            {
                "activity": item.activity,
                "location": item.location,
                "start": window[0],
                "end": window[1],
                "places": places,
            },
            Requirements(places=places, window=window),
        )
        if answer is not None:
            for p in answer.tasks:
                self.tasks.append(
                    Task(
                        self.day_start + p.start_min,
                        self.day_start + p.end_min,
                        p.activity,
                        p.location,
                    )
                )
        else:
            for s, e in split_window(start, end, DECOMPOSITION_RULE.count[0]):
                self.tasks.append(Task(s, e, item.activity, item.location))

    def begin(self, task: Task, now: int) -> None:
        """Go to the task's area, pick the object to use and set its status."""
        known = task.location in self.tree and task.location in self.world.areas_of
        structure = task.location if known else self.world.structure_of(self.area)
        if task.area is None:
            areas = self.tree.areas(structure) or self.world.areas_of[structure][:1]
            task.area = (
                self._choose(task.activity, "areas", areas, now) if len(areas) > 1 else areas[0]
            )
        self.move_to(task.area)
        if task.item is None and task.kind != "free":
            task.item = self._pick_item(task.activity, task.area, now)
        self.current = task
        self.status = task.activity
        if task.item is not None:
            self._use_item(task.item, task.activity, now)
        self.remember("observation", f"{self.name} is {task.activity}", now, subject=self.name)

    def _choose(self, task: str, what: str, options: list[str], now: int) -> str:
        answer = self._ask(
            FINDING_LOCATION,
            now,
            {"task": task, "what": what, "options": options},
            Requirements(options=options),
        )
        return str(answer.location) if answer is not None else options[0]

    def _pick_item(self, activity: str, area: str, now: int) -> str | None:
        items = self.world.items_of[area]
        if not items:
            return None
        labels = list(dict.fromkeys(self.world.actor(i).label for i in items))
        label = self._choose(activity, "objects", labels, now) if len(labels) > 1 else labels[0]
        same = [i for i in items if self.world.actor(i).label == label]
        idle = [i for i in same if self.world.status(i) == IDLE]
        return (idle or same)[0]

    def _use_item(self, item: str, activity: str, now: int) -> None:
        actor = self.world.actor(item)
        answer = self._ask(
            ACTOR_STATUS,
            now,
            {"actor": actor.label, "activity": activity, "area": self.world.area_of(item)},
        )
        status = str(answer.status) if answer is not None else f"being used by {self.name}"
        self.world.set_status(item, status)
        self.item, self.item_status = item, status

    def _release_item(self) -> None:
        # Only undo our own status: someone else may be using the item by now.
        if self.item is not None and self.world.status(self.item) == self.item_status:
            self.world.set_status(self.item, IDLE)
        self.item, self.item_status = None, None

    def go_to_sleep(self, now: int) -> None:
        self._release_item()
        self.move_to(self.world.area_of(self.seed.bed))
        self._use_item(self.seed.bed, "sleeping", now)
        self.asleep = True
        self.status = "sleeping"
        self.current = None
        self.tasks.clear()
        self.plan = []

    def move_to(self, area: str) -> None:
        """Walk to an area: structures along the way and the destination's rooms and items
        join the personal tree."""
        here = self.world.structure_of(self.area)
        there = self.world.structure_of(area)
        if here != there:
            self.tree.add_all(self.world.structures_near(here, there, self.config.sight_radius))
        self.tree.add_all(self.world.areas_of[there])
        self.tree.add_all(self.world.items_of[area])
        self.area = area

    # -- perception and reaction ----------------------------------------------------------------

    def perceive(self, now: int, town: Town) -> list[Event]:
        """Notice up to ``attention_bandwidth`` new events here; each becomes a memory."""
        structure = self.world.structure_of(self.area)
        seen: list[tuple[int, str, str, str, str]] = []  # priority, key, kind, subject, text
        for other in town:
            if other is self or self.world.structure_of(other.area) != structure:
                continue
            self.known_agents.add(other.name)
            seen.append((0, f"agent:{other.name}", other.status, other.name, "agent"))
        for item in self.world.items_of[self.area]:
            if item == self.item:
                continue
            status = self.world.status(item)
            seen.append((1 if status != IDLE else 2, item, status, item, "item"))
        self.tree.add_all(self.world.items_of[self.area])
        reobserve = int(self.config.reobserve_hours * 60)
        fresh = []
        for priority, key, status, subject, kind in seen:
            last = self.last_seen.get(key)
            if last is not None and last[0] == status and now - last[1] < reobserve:
                continue
            fresh.append((priority, key, status, subject, kind))
        fresh.sort(key=lambda e: e[0])  # stable: agents, then busy items, then idle ones
        noticed = []  # key, kind, subject, text
        for _, key, status, subject, kind in fresh[: self.config.attention_bandwidth]:
            self.last_seen[key] = (status, now)
            if kind == "agent":
                text = f"{subject} is {status}"
            else:
                text = f"{self.world.actor(subject).label} in {structure} is {status}"
            noticed.append((key, kind, subject, text))
        scores = self.remember_many(
            "observation", [(text, subject, ()) for _, _, subject, text in noticed], now
        )
        return [
            Event(key, "agent" if kind == "agent" else "item", subject, text, score)
            for (key, kind, subject, text), score in zip(noticed, scores, strict=True)
        ]

    def react(self, now: int, events: list[Event], town: Town) -> None:
        if self.current is None or self.current.kind in ("sleep", "reaction"):
            return
        cooldown = int(self.config.react_cooldown_hours * 60)
        for event in events:
            if event.kind != "agent":
                continue
            other = town.by_name(event.subject)
            if other.asleep or now < other.busy_until:
                continue
            if now - self.last_reaction.get(other.name, -cooldown) < cooldown:
                continue
            if self.rng.random() >= self.config.p_agent_reaction:
                continue
            self.last_reaction[other.name] = now
            other.last_reaction[self.name] = now
            self.agent_reaction(now, other, town)
            return
        for event in events:
            if event.kind == "item" and self.rng.random() < self.config.p_actor_reaction:
                self.actor_reaction(now, event)
                return

    def actor_reaction(self, now: int, event: Event) -> None:
        assert self.current is not None
        current = self.current.activity
        label = self.world.actor(event.subject).label
        reaction = ReactionOptions.of(current, f"use the {label}")
        options = reaction.shuffled(self.options_rng)
        answer = self._ask(
            ACTOR_REACTION,
            now,
            {"current": current, "observation": event.description, "options": options},
            Requirements(options=options),
            context={"current": current, "observation": event.description},
        )
        if answer is None or answer.choice == reaction.keep:
            return
        minutes = self._round_minutes(answer.minutes)
        if answer.choice == reaction.act:
            area = self.world.area_of(event.subject)
            task = Task(
                now,
                now + minutes,
                answer.activity,
                self.world.structure_of(area),
                area=area,
                item=event.subject,
                kind="reaction",
            )
        else:
            task = self._elsewhere(now, answer.activity, minutes)
        self.interrupt(
            now, task, f"{self.name} noticed that {event.description} and is now {answer.activity}."
        )

    def agent_reaction(self, now: int, other: Agent, town: Town) -> None:
        assert self.current is not None
        current = self.current.activity
        memories = [m.description for m in self.memory.retrieve(other.name, now, 5)]
        reaction = ReactionOptions.of(current, f"talk to {other.name}")
        options = reaction.shuffled(self.options_rng)
        answer = self._ask(
            AGENT_REACTION,
            now,
            {
                "current": current,
                "other": other.name,
                "other_status": other.status,
                "memories": memories,
                "options": options,
            },
            Requirements(options=options),
        )
        if answer is None or answer.choice == reaction.keep:
            return
        if answer.choice == reaction.act:
            converse(self, other, now)
            return
        task = self._elsewhere(now, answer.activity, self._round_minutes(answer.minutes))
        self.interrupt(now, task, f"{self.name} saw {other.name} and is now {answer.activity}.")

    def _round_minutes(self, minutes: int) -> int:
        step = self.config.minutes_per_step
        return max(step, -(-int(minutes) // step) * step)

    def _elsewhere(self, now: int, activity: str, minutes: int) -> Task:
        areas = self.tree.areas()
        area = self._choose(activity, "areas", areas, now) if len(areas) > 1 else areas[0]
        return Task(
            now, now + minutes, activity, self.world.structure_of(area), area=area, kind="reaction"
        )

    def interrupt(self, now: int, task: Task, event: str) -> None:
        """Do ``task`` now, then revise the rest of today's plan around it."""
        self._release_item()
        self.tasks.clear()
        self.begin(task, now)
        self.revise_plan(now, task.end, event)

    def revise_plan(self, now: int, busy_until: int, event: str) -> None:
        end = self.day_end
        remaining = [
            PlanItem(
                start=hhmm(max(p.start, busy_until) - self.day_start),
                end=hhmm(p.end - self.day_start),
                activity=p.activity,
                location=p.location,
            )
            for p in self.plan
            # A leftover shorter than the rule's minimum cannot be kept; showing it would
            # contradict the prompt's own rule, and models copy it into invalid answers.
            if p.end - max(p.start, busy_until) >= REVISION_RULE.min_minutes
        ]
        if not remaining or end - busy_until < REVISION_RULE.min_minutes:
            # Nothing left to fit (or no room for it): the day simply ends after the reaction.
            self.plan = [self._day_item(p) for p in remaining]
            return
        places = self.places()
        window = (hhmm(busy_until - self.day_start), hhmm(end - self.day_start))
        answer = self._ask(
            REVISION,
            now,
            {
                "event": event,
                "remaining_activities": [p.activity for p in remaining],
                "remaining": json.dumps([p.model_dump() for p in remaining], ensure_ascii=False),
                "start": window[0],
                "end": window[1],
                "places": places,
            },
            Requirements(places=places, window=window),
        )
        if answer is not None:
            new = answer.plans
        else:
            new = fit_to_window(
                remaining,
                busy_until - self.day_start,
                end - self.day_start,
                min_minutes=REVISION_RULE.min_minutes,
            )
        self.plan = [self._day_item(p) for p in new]

    # -- dialogue -------------------------------------------------------------------------------

    def relationship(self, other: Agent, now: int) -> str:
        nodes = self.memory.retrieve(other.name, now, self.config.retrieve_k)
        answer = self._ask(
            RELATIONSHIP,
            now,
            {"other": other.name, "statements": [m.description for m in nodes]},
        )
        return str(answer.summary) if answer is not None else f"{self.name} knows {other.name}."

    def utter(
        self, other: Agent, relationship: str, transcript: list[str], now: int
    ) -> tuple[str, bool] | None:
        place = self.world.structure_of(self.area)
        answer = self._ask(
            UTTERANCE,
            now,
            {
                "other": other.name,
                "place": place,
                "relationship": relationship,
                "current": self.current.activity if self.current else self.status,
                "transcript": transcript or ["(nothing has been said yet)"],
                "count": str(len(transcript)),
            },
        )
        if answer is None:
            return None
        return str(answer.utterance), bool(answer.end_conversation)

    def remember_dialogue(self, other: Agent, transcript: list[str], now: int) -> None:
        answer = self._ask(DIALOGUE_SUMMARY, now, {"other": other.name, "transcript": transcript})
        text = (
            str(answer.summary) if answer is not None else f"{self.name} talked with {other.name}."
        )
        self.remember("chat", text, now, subject=other.name)


def converse(a: Agent, b: Agent, now: int) -> list[str]:
    """A conversation: relationship summaries, turns until one side ends it or the utterance
    limit, then a summary per side. Both agents are busy while it lasts."""
    a.conversations += 1
    b.conversations += 1
    views = {a.name: a.relationship(b, now), b.name: b.relationship(a, now)}
    a.status, b.status = f"talking with {b.name}", f"talking with {a.name}"
    transcript: list[str] = []
    speaker, listener = a, b
    for _ in range(a.config.max_utterances):
        said = speaker.utter(listener, views[speaker.name], transcript, now)
        if said is None:
            break
        transcript.append(f"{speaker.name}: {said[0]}")
        if said[1]:
            break
        speaker, listener = listener, speaker
    if transcript:
        a.remember_dialogue(b, transcript, now)
        b.remember_dialogue(a, transcript, now)
    step = a.config.minutes_per_step
    minutes = max(step, -(-len(transcript) // step) * step)  # about a minute per utterance
    a.busy_until = b.busy_until = now + minutes
    if a.config.share_places_in_dialogue:
        # Talk spreads knowledge of places: each side hears of one place the other knows.
        for x, y in ((a, b), (b, a)):
            new = [s for s in y.tree.structures() if s not in x.tree]
            if new:
                x.tree.add(new[0])
    return transcript
