"""Tune: per category, the setting (embed mode, threshold, and keyword slots where calls carry
slots) with the largest cost cut whose excess of wrong hits is bounded by δ, chosen on one
part of a recording and confirmed on the rest.

Every candidate setting is one replay of the whole recording (:func:`~llmcache.replay.replay`:
the live cache, the recording as the model); each call is counted in the *tune* part (earlier
calls, or some agents) or the *check* part (the rest). The tune part chooses, the check part
bounds. Per category, candidates whose tune-part expected excess is at most δ (its estimate,
answers to the very same prompt at 0: with a few hundred calls a part's 95% bound is ten points
wide or more, too wide to choose by) are taken
in a fixed sequence, strictest threshold first: the loosest that the check part confirms in
turn -- its *expected* excess has a one-sided 95% bound at most δ, and it cuts cost there --
is chosen, answers to the very same prompt counted at their excess of 0 (the model's own
answers; docs/promise.md). The order is fixed by the tune part alone, so the check part stays
a check, not a second search (:func:`select`). A category
where none is confirmed is left uncached (``bypass``), with the reason. The chosen settings
are then replayed once more together, and the figures written beside the configuration are
that replay's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ._config import MAX_LEAD_WORDS, CacheConfig, CategoryPolicy
from ._learn import TemplateLearner
from ._ledger import PriceTable
from ._protocols import Embedder
from ._replay import (
    CallResult,
    Equivalence,
    Figures,
    ReplayReport,
    equivalences_for,
    figures,
    load_config,
    replay,
    report_of,
)
from ._replay_calls import ReplayCall, ReplayInput
from ._shapes import chat_prompt
from ._slots import ANCHOR_TIE
from ._types import EmbedMode

__all__ = [
    "DEFAULT_LEAD_WORDS",
    "DEFAULT_THRESHOLDS",
    "CategoryChoice",
    "Setting",
    "Split",
    "TuneResult",
    "check_mask",
    "select",
    "tune",
]

Split = Literal["time", "agents"]

#: The raw-cosine thresholds tried by default: 0.80 to 0.99 in steps of 0.01, and 0.999 (the
#: very same keywords only).
DEFAULT_THRESHOLDS: tuple[float, ...] = (
    *(round(0.80 + 0.01 * i, 2) for i in range(20)),
    0.999,
)


#: The leading words tried in keyword mode by default (``CacheConfig.lead_words``): none, and
#: two (a subject is most often a name or an article and a noun: "Rajiv Patel", "the cafe").
DEFAULT_LEAD_WORDS: tuple[int, ...] = (0, 2)


class Setting(BaseModel):
    """One setting a category may be cached with. ``slots``: in keyword mode, the slots whose
    values are the keywords of calls that carry slots (``None``: the call's own keywords, or
    every slot); ``lead_words``: how many leading words of the embedded text must match
    (``CacheConfig.lead_words``; 0: none)."""

    model_config = ConfigDict(frozen=True)

    embed: EmbedMode
    threshold: float
    slots: tuple[str, ...] | None = None
    lead_words: int = 0

    def describe(self) -> str:
        keyed = f" (keywords: slot {', '.join(self.slots)})" if self.slots else ""
        lead = f", the first {self.lead_words} words exact" if self.lead_words else ""
        return f"{self.embed.value} mode{keyed}, threshold {self.threshold:g}{lead}"

    def policy(self) -> CategoryPolicy:
        """The category policy that caches with this setting."""
        return CategoryPolicy(
            embed=self.embed,
            threshold=self.threshold,
            lead_words=self.lead_words or None,
            keyword_slots=self.slots if self.embed is EmbedMode.KEYWORD else None,
        )


class CategoryChoice(BaseModel):
    """What tuning chose for one category, and on which figures: ``setting`` is ``None`` when
    the category is left uncached (``why`` says why)."""

    category: str
    setting: Setting | None
    why: str
    tune: Figures | None = None
    check: Figures | None = None
    checked: int = 0


class TuneResult(BaseModel):
    """The tuned configuration, each category's choice, and the confirming replay's figures
    on the check part (``check``) and on the tune part (``tuned_on``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    delta: float
    split: Split
    check_fraction: float
    config: CacheConfig
    choices: dict[str, CategoryChoice]
    check: ReplayReport
    tuned_on: ReplayReport
    keyword_slots: dict[str, list[str]] = {}
    candidates: int = 0
    seconds: float = 0.0
    #: Tuned as code that declares nothing: the categories are templates learned from the
    #: calls (``tune(learn_templates=True)``).
    learned: bool = False

    def tuning(self) -> dict[str, Any]:
        """What is written beside the configuration (under ``"tuning"``): how it was chosen
        and the figures of every category on the tune and the check part."""
        return {
            "delta": self.delta,
            "split": self.split,
            "check_fraction": self.check_fraction,
            "learn_templates": self.learned,
            "candidates": self.candidates,
            "check": self.check.summary(),
            "tune": self.tuned_on.summary(),
            "categories": {
                name: {
                    "setting": None if c.setting is None else c.setting.model_dump(mode="json"),
                    "why": c.why,
                    "checked": c.checked,
                    # In the category's policy too, for calls that carry slots and no
                    # keywords; a template that gives its keywords chooses them itself.
                    **(
                        {"keyword_slots": self.keyword_slots[name]}
                        if name in self.keyword_slots
                        else {}
                    ),
                }
                for name, c in sorted(self.choices.items())
            },
        }

    def render(self) -> str:
        lines = [
            f"tuned for an expected excess of at most {100 * self.delta:.1f} points "
            f"({self.candidates} settings replayed, split by {self.split}, "
            f"check part {100 * self.check_fraction:.0f}%)"
        ]
        for name, choice in sorted(self.choices.items()):
            chosen = "uncached" if choice.setting is None else choice.setting.describe()
            lines.append(f"  {name}: {chosen} -- {choice.why}")
            if name in self.keyword_slots and not self.learned:
                # The configuration embeds it where calls carry slots; a template that gives
                # its keywords itself (FilledPrompt.cache_options) chooses them in its code.
                slots = ", ".join(repr(n) for n in self.keyword_slots[name])
                lines.append(
                    f"    (a template that gives its keywords: set its keyword_slots to ({slots},))"
                )
        lines.append("")
        lines.append("check part (the chosen settings, replayed together):")
        lines.append(self.check.render(wrong_hits=10))
        return "\n".join(lines)


def check_mask(calls: Sequence[ReplayCall], split: Split, check_fraction: float) -> list[bool]:
    """Which calls are in the check part: the last ``check_fraction`` of the calls by time
    (stream order where calls carry none), or, by agents, the calls of the agents that come
    last in the order agents first appear, as near ``check_fraction`` of the calls as whole
    agents allow (at least one agent on each side when there are two)."""
    if not 0.0 < check_fraction < 1.0:
        raise ValueError(f"check_fraction is between 0 and 1, not {check_fraction}")
    n = len(calls)
    if split == "time":
        order = sorted(range(n), key=lambda i: (calls[i].time is None, calls[i].time or 0.0, i))
        first_checked = round(n * (1.0 - check_fraction))
        mask = [False] * n
        for rank, i in enumerate(order):
            mask[i] = rank >= first_checked
        return mask
    counts: dict[str, int] = defaultdict(int)
    for call in calls:
        counts[call.agent] += 1
    agents = list(counts)
    checked: set[str] = set()
    total = 0
    for agent in reversed(agents):
        if len(checked) == len(agents) - 1 or total >= n * check_fraction:
            break
        checked.add(agent)
        total += counts[agent]
    return [call.agent in checked for call in calls]


def _key(learned: bool) -> Callable[[CallResult], str | None]:
    """What a result is tuned under: the recorded category, or (templates learned) the
    learned template it was filed under (``None``: it passed through, nothing to tune)."""
    return (lambda r: r.filed_under) if learned else (lambda r: r.category)


def _by_category(
    results: Sequence[CallResult],
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    part: bool,
    equivalences: Mapping[str, Equivalence],
    key: Callable[[CallResult], str | None],
) -> dict[str, Figures]:
    rows: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(results):
        name = key(row)
        if mask[i] == part and name is not None:
            rows[name].append(i)
    return {
        name: figures([results[i] for i in idx], [calls[i] for i in idx], equivalences)
        for name, idx in rows.items()
    }


def _crossings(
    results: Sequence[CallResult], key: Callable[[CallResult], str | None]
) -> dict[str, int]:
    """Per category, the hits that served an answer another agent's call stored (in a table
    the agents share: a template learned from the traffic, whose calls name no agent)."""
    crossed: dict[str, int] = defaultdict(int)
    for row in results:
        name = key(row)
        if name is not None and row.crossed:
            crossed[name] += 1
    return crossed


def _within(f: Figures, delta: float) -> bool:
    """Whether the one-sided 95% bound of the expected excess is at most δ (what the check
    part must show): answers to the very same prompt counted at their excess of 0, near
    neighbours at their own bound, weighted by their share (:attr:`Figures.bound`)."""
    return f.served > 0 and f.bound is not None and f.bound <= 100 * delta


def _estimated_within(f: Figures, delta: float) -> bool:
    """Whether the estimated expected excess is at most δ (what the tune part must show):
    answers to the very same prompt at their excess of 0, near neighbours at their own
    estimate, by their share (:attr:`Figures.expected`)."""
    return f.served > 0 and f.expected is not None and f.expected <= 100 * delta


def select(
    category: str,
    measured: Sequence[tuple[Setting, Figures, Figures]],
    delta: float,
    max_checks: int | None = None,
) -> CategoryChoice:
    """The choice for one category from each candidate's ``(tune, check)`` figures: see the
    module's docstring. A choice always has a check-part bound at most δ.

    The check part tests a *fixed sequence*: per setting family (embed mode, keyword slots and
    leading words), the candidates the tune part qualified, strictest threshold first, down to the
    first that the check part does not confirm; the family's choice is the last confirmed.
    The order is fixed by the tune part alone, so testing each step at the full level keeps
    it for the whole chain (a fixed-sequence procedure); of the families' choices, the one
    with the largest tune-part cut is taken. ``max_checks`` caps each chain (``None``: no cap).
    """
    qualified = [m for m in measured if _estimated_within(m[1], delta) and m[1].cost_cut > 0]
    if not qualified:
        return CategoryChoice(
            category=category,
            setting=None,
            why=f"no setting served with an estimated excess <= {100 * delta:g} points "
            "and a cost cut on the tune part",
        )
    families: dict[tuple[EmbedMode, tuple[str, ...] | None, int], list[Any]] = defaultdict(list)
    for m in qualified:
        families[(m[0].embed, m[0].slots, m[0].lead_words)].append(m)
    chosen: list[tuple[Setting, Figures, Figures, int]] = []
    checked = 0
    failed: tuple[Setting, Figures, Figures] | None = None
    for chain in families.values():
        chain.sort(key=lambda m: (-m[0].threshold, m[1].cost_cut))
        last = None
        for step, m in enumerate(chain[:max_checks], start=1):
            checked += 1
            if not (_within(m[2], delta) and m[2].cost_cut > 0):
                failed = failed or m
                break
            last = (*m, step)
        if last is not None:
            chosen.append(last)
    if chosen:
        candidate, tune_figures, check_figures, step = max(chosen, key=lambda c: c[1].cost_cut)
        return CategoryChoice(
            category=category,
            setting=candidate,
            why=f"the loosest setting the check part confirms, from the strictest down "
            f"({step} confirmed in turn): tune-part cut {100 * tune_figures.cost_cut:.1f}%, "
            f"check-part cut {100 * check_figures.cost_cut:.1f}%, expected excess at most "
            f"{check_figures.bound:+.1f} points (one-sided 95%)",
            tune=tune_figures,
            check=check_figures,
            checked=checked,
        )
    best = failed or qualified[0]
    shown = "-" if best[2].bound is None else f"{best[2].bound:+.1f} points"
    return CategoryChoice(
        category=category,
        setting=None,
        why=f"the check part confirmed not even the strictest setting the tune part qualified "
        f"({best[0].describe()}: check-part bound {shown}, cut {100 * best[2].cost_cut:.1f}%)",
        tune=best[1],
        check=best[2],
        checked=checked,
    )


def _config_with(
    base: CacheConfig, settings: Mapping[str, CategoryPolicy], equivalences: Mapping[str, Any]
) -> CacheConfig:
    categories = dict(base.categories)
    for name, policy in settings.items():
        if policy.equivalence is None and name in equivalences:
            policy = policy.model_copy(update={"equivalence": equivalences[name]})
        categories[name] = policy
    return base.updated(categories=categories)


def _choice(
    category: str,
    measured: Sequence[tuple[Setting, Figures, Figures]],
    delta: float,
    max_checks: int | None,
) -> CategoryChoice:
    if not measured:
        return CategoryChoice(
            category=category,
            setting=None,
            why="its calls are all in one part: nothing to tune on or to check with",
        )
    return select(category, measured, delta, max_checks)


def _candidates(
    slot_choices: Mapping[str, Sequence[tuple[str, ...] | None]],
    embeds: Sequence[EmbedMode],
    thresholds: Sequence[float],
    lead_words: Sequence[int] = (0,),
) -> list[tuple[EmbedMode, float, int, dict[str, tuple[str, ...] | None]]]:
    """Every replay tune runs: an embed mode, a threshold, the leading words that must match
    (keyword mode only: in full mode every prompt of a template begins alike), and per
    category the keyword slots tried (``slot_choices``; ``None``: the calls' own keywords, or
    the slots' roles); each round of keyword mode tries one choice of every category that has
    another left."""
    rounds = max((len(v) for v in slot_choices.values()), default=1)
    out: list[tuple[EmbedMode, float, int, dict[str, tuple[str, ...] | None]]] = []
    for embed in embeds:
        keyword = embed is EmbedMode.KEYWORD
        for lead in sorted(set(lead_words)) if keyword else [0]:
            for j in range(rounds if keyword else 1):
                chosen = {n: v[j] for n, v in slot_choices.items() if j < len(v)}
                out.extend((embed, threshold, lead, chosen) for threshold in thresholds)
    return out


def _recorded_choices(calls: Sequence[ReplayCall]) -> dict[str, list[tuple[str, ...] | None]]:
    """Per recorded category, the keyword slots tried: each slot its calls carry, where they
    carry more than one (one slot alone is what every slot embeds)."""
    names: dict[str, set[str]] = defaultdict(set)
    for call in calls:
        names[call.category].update(call.slots or {})
    return {
        name: [None] + ([(n,) for n in sorted(slots)] if len(slots) > 1 else [])
        for name, slots in sorted(names.items())
    }


def _learned_choices(
    calls: Sequence[ReplayCall], **given: Any
) -> dict[str, list[tuple[str, ...] | None]]:
    """Per template learned from the calls (one replay as code that declares nothing), the
    keyword slots tried: its slots with more values than the agents whose calls it filed have
    (``ANCHOR_TIE`` times, as the slot roles count them): a slot with no more says whose call
    it is (a name, a persona line), not what is asked, and trying each of Park's thirteen
    slots made tuning 34 times as long as the declared categories'. A template the learner
    replaced on the way (widened, say) has none. The learner is deterministic, so every
    candidate's replay learns the same templates."""
    learner = TemplateLearner()
    report = replay(calls, learn_templates=learner, **given)
    filed = sorted({r.filed_under for r in report.results if r.filed_under is not None})
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    agents: dict[str, set[str]] = defaultdict(set)
    for call in calls:
        prompt = chat_prompt({"messages": call.messages})
        options = None if isinstance(prompt, str) else learner.recognise(*prompt)
        if options is not None and options.slots:
            agents[options.category].add(call.agent)
            for slot, value in options.slots.items():
                values[options.category][slot].add(value)
    order = {t.name: list(t.slots) for t in learner.templates()}
    return {
        name: [None]
        + [
            (slot,)
            for slot in order.get(name, [])
            if agents[name] and len(values[name][slot]) > ANCHOR_TIE * len(agents[name])
        ]
        for name in filed
    }


class _Once(logging.Filter):
    """Lets each message through once: tune replays the same calls hundreds of times, and a
    warning about them (a table the agents share, say) says nothing new the second time."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


@contextlib.contextmanager
def _each_warning_once() -> Iterator[None]:
    once = _Once()
    logger = logging.getLogger("llmcache")
    logger.addFilter(once)
    try:
        yield
    finally:
        logger.removeFilter(once)


@_each_warning_once()
def tune(
    calls: Sequence[ReplayCall] | ReplayInput,
    *,
    delta: float = 0.05,
    split: Split = "time",
    check_fraction: float = 0.5,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    embeds: Sequence[EmbedMode] = (EmbedMode.KEYWORD, EmbedMode.FULL),
    lead_words: Sequence[int] = DEFAULT_LEAD_WORDS,
    base: CacheConfig | str | os.PathLike[str] | None = None,
    embedder: Embedder | None = None,
    seed: int | None = 0,
    prices: PriceTable | None = None,
    max_checks: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    learn_templates: bool = False,
) -> TuneResult:
    """Choose each category's embed mode, threshold, leading words that must match (each of
    ``lead_words``, in keyword mode: ``CacheConfig.lead_words``) and (where its calls carry
    more than one slot) keyword slot from ``calls`` (see the module's
    docstring): a configuration (``base``'s other settings kept) whose every cached category
    showed, on the check part, an expected excess whose one-sided 95% bound is at most
    ``delta`` (:attr:`~llmcache.replay.Figures.bound`; docs/promise.md). A keyword slot
    chosen is in the category's policy (``CategoryPolicy.keyword_slots``, for calls that
    carry slots and no keywords) and in :attr:`TuneResult.keyword_slots`, for a template that
    gives its own keywords (its ``keyword_slots``).

    ``learn_templates``: tune the calls as agent code that declares nothing sends them, filed
    under templates the cache learns from the traffic (``replay(learn_templates=True)``): the
    categories are the learned templates (their names: ``CachedLLM(learn_templates=...)``
    with the configuration written files the next run's calls under the same ones), and
    their slots are the keyword slots tried. A setting under which a hit served one agent
    another agent's answer, in either part, is never chosen.

    Pass a :class:`~llmcache.embedders.StoredEmbedder` as ``embedder``: every candidate is a
    replay, and the texts are the same in all of them. ``progress`` is told ``(replays done,
    replays in all)`` as the candidates and the confirming replay run."""
    started = time.perf_counter()
    skipped: dict[str, int] = {}
    if isinstance(calls, ReplayInput):
        skipped = calls.skipped
        calls = calls.calls
    calls = list(calls)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta is a fraction between 0 and 1, not {delta}")
    if any(not 0 <= n <= MAX_LEAD_WORDS for n in lead_words):
        raise ValueError(f"lead_words are each from 0 to {MAX_LEAD_WORDS}, not {list(lead_words)}")
    base_config = load_config(base)
    mask = check_mask(calls, split, check_fraction)
    equivalences = equivalences_for(calls, base_config)
    given: dict[str, Any] = {"embedder": embedder, "seed": seed, "prices": prices}
    tick = progress or (lambda done, total: None)
    learned = learn_templates is True
    slot_choices = (
        _learned_choices(calls, config=base_config, **given)
        if learned
        else _recorded_choices(calls)
    )
    categories = sorted(slot_choices)
    candidates = _candidates(slot_choices, embeds, thresholds, lead_words or (0,))
    total = len(candidates) + 1
    tick(0, total)
    measured: dict[str, list[tuple[Setting, Figures, Figures]]] = defaultdict(list)
    crossed: dict[str, int] = defaultdict(int)
    for replays, (embed, threshold, lead, chosen) in enumerate(candidates, start=1):
        settings = {
            name: Setting(embed=embed, threshold=threshold, slots=chosen.get(name), lead_words=lead)
            for name in categories
        }
        report = _replayed(calls, base_config, settings, equivalences, learned, given)
        tick(replays, total)
        # Each category's setting counted in the rounds that try one of its choices only.
        tried = {name: settings[name] for name in chosen}
        _measure(report, calls, mask, equivalences, learned, tried, measured, crossed)
    choices = {name: _choice(name, measured[name], delta, max_checks) for name in categories}
    for name, count in crossed.items():
        note = f"; {count} settings refused: a hit served one agent another agent's answer"
        choices[name] = choices[name].model_copy(update={"why": choices[name].why + note})
    chosen_settings = {name: c.setting for name, c in choices.items()}
    # Confirmed together: the figures written beside the file are this replay's.
    final = _replayed(calls, base_config, chosen_settings, equivalences, learned, given)
    tick(total, total)
    parts = {
        part: _part(final, calls, [m == part for m in mask], equivalences, skipped, seed)
        for part in (False, True)
    }
    return TuneResult(
        delta=delta,
        split=split,
        check_fraction=check_fraction,
        config=_config_of(base_config, chosen_settings, equivalences),
        choices=choices,
        check=parts[True],
        tuned_on=parts[False],
        keyword_slots=_slots_of(chosen_settings),
        candidates=len(candidates),
        seconds=time.perf_counter() - started,
        learned=learned,
    )


def _measure(
    report: ReplayReport,
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    equivalences: Mapping[str, Equivalence],
    learned: bool,
    settings: Mapping[str, Setting],
    measured: dict[str, list[tuple[Setting, Figures, Figures]]],
    crossed: dict[str, int],
) -> None:
    """One candidate's replay, per category: its figures on both parts added to ``measured``,
    or, where a hit served one agent another agent's answer, a refusal counted in ``crossed``."""
    key = _key(learned)
    tuned = _by_category(report.results, calls, mask, False, equivalences, key)
    checked = _by_category(report.results, calls, mask, True, equivalences, key)
    crossings = _crossings(report.results, key)
    for name, setting in settings.items():
        if crossings.get(name):
            crossed[name] += 1
        elif name in tuned and name in checked:
            measured[name].append((setting, tuned[name], checked[name]))


def _part(
    report: ReplayReport,
    calls: Sequence[ReplayCall],
    inside: Sequence[bool],
    equivalences: Mapping[str, Equivalence],
    skipped: Mapping[str, int],
    seed: int | None,
) -> ReplayReport:
    """The report of the calls of one part of a replay."""
    idx = [i for i in range(len(calls)) if inside[i]]
    return report_of(
        [report.results[i] for i in idx],
        [calls[i] for i in idx],
        equivalences,
        skipped=skipped,
        seed=seed,
    )


def _config_of(
    base: CacheConfig, settings: Mapping[str, Setting | None], equivalences: Mapping[str, Any]
) -> CacheConfig:
    """``base`` with each category cached by its setting (``None``: left uncached)."""
    policies = {
        name: CategoryPolicy(bypass=True) if s is None else s.policy()
        for name, s in settings.items()
    }
    return _config_with(base, policies, equivalences)


def _slots_of(settings: Mapping[str, Setting | None]) -> dict[str, list[str]]:
    return {name: list(s.slots) for name, s in settings.items() if s is not None and s.slots}


def _replayed(
    calls: Sequence[ReplayCall],
    base: CacheConfig,
    settings: Mapping[str, Setting | None],
    equivalences: Mapping[str, Any],
    learned: bool,
    given: Mapping[str, Any],
) -> ReplayReport:
    """One replay of ``calls`` under ``settings``: with the recorded options (a keyword slot
    chosen making those slots the keywords), or as code that declares nothing (the keyword
    slots in the learned templates' policies)."""
    config = _config_of(base, settings, equivalences)
    if learned:
        return replay(calls, config, learn_templates=True, **given)
    return replay(calls, config, keyword_slots=_slots_of(settings), **given)
