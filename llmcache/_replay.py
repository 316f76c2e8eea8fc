"""Replay: recorded calls sent again through the real :class:`~llmcache.CachedLLM` with a given
configuration, the recording itself standing in for the model, so that any setting can be
measured on a day of real traffic in seconds and without paying for a call.

The upstream (:class:`RecordedUpstream`) answers a call's first request with the call's
recorded answer, its *true* answer. Any further request of the same call (a twin, the second
call of an explored hit) gets another recorded answer to the identical prompt, drawn with a
seeded generator from the call's own ``other_answers`` and the answers of the stream's other
calls with that prompt: the model's own spread. A prompt answered once has no spread to draw
from and repeats its answer. Since the cache in between is the live one, a replay is exactly the
live cache on the same stream with the same seeds (tests/test_replay.py).

Graded against the true answers, by each category's equivalence (:func:`equivalences_for`):
how many calls were served, what they cost, how many served answers are acceptable, the model's
own agreement on identical prompts, and the excess of wrong hits over the model's own
disagreement with its 95% interval. Where every served call was recorded with a second answer
(``other_answers``), the excess is measured on the same queries: each served answer beside the
model's own second answer to that query, graded the same way
(:func:`~llmcache._budget.paired_excess_interval`); otherwise the served answers' wrong rate
less the disagreement of every recorded pair (:func:`~llmcache._budget.excess_interval`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import BaseModel, Field

from ._budget import Z_ONE_SIDED, closes, excess_interval, paired_excess_interval
from ._cache import SemanticCache
from ._client import CachedLLM
from ._config import CacheConfig, CategoryPolicy
from ._equivalence import Within, equivalence_name, one_number, same_answer
from ._errors import LLMCacheError, ReplayError
from ._filing import embedding_text
from ._learn import TemplateLearner
from ._ledger import PriceTable
from ._protocols import Embedder
from ._replay_calls import ReplayCall, ReplayInput
from ._site import code_site, text_alone
from ._tokens import count_tokens
from ._types import CacheOptions, CallInfo, EmbedMode, Usage

__all__ = [
    "CallResult",
    "Figures",
    "RecordedUpstream",
    "ReplayReport",
    "WrongHit",
    "embedding_texts",
    "equivalences_for",
    "figures",
    "load_config",
    "options_for",
    "replay",
    "report_of",
    "with_equivalences",
]

Equivalence = Callable[[str, str], bool]


class _Completions:
    def __init__(self, owner: RecordedUpstream) -> None:
        self._owner = owner

    def create(self, **kwargs: Any) -> ChatCompletion:
        return self._owner.answer(kwargs)


class _Chat:
    def __init__(self, owner: RecordedUpstream) -> None:
        self.completions = _Completions(owner)


class RecordedUpstream:
    """The recording as the model: quacks like ``openai.OpenAI`` on ``chat.completions.create``
    (non-streaming), answering with real ``ChatCompletion`` objects whose usage is the
    recorded one. :meth:`ask` says which call of the stream the next requests belong to."""

    def __init__(self, calls: Sequence[ReplayCall], seed: int | None = 0) -> None:
        self.calls = list(calls)
        keys = [call.prompt_key() for call in self.calls]
        same_prompt: dict[str, list[int]] = defaultdict(list)
        for index, key in enumerate(keys):
            same_prompt[key].append(index)
        # Each call's fellows (itself among them), found once: a prompt's key is its whole
        # messages as JSON, too dear to build again for every twin and exploration.
        self._fellows = [same_prompt[key] for key in keys]
        self._rng = random.Random(seed)
        self._ids = itertools.count(1)
        self._current: int | None = None
        self._answered = False
        self.requests = 0
        self.drawn = 0  # requests answered from the spread (twins, explorations' repeats)
        self.chat = _Chat(self)

    def ask(self, index: int) -> None:
        """The requests that follow are those of call ``index``."""
        self._current = index
        self._answered = False

    def answer(self, kwargs: Mapping[str, Any]) -> ChatCompletion:
        if self._current is None:
            raise ReplayError("a request reached the recording before any call was replayed")
        call = self.calls[self._current]
        if kwargs.get("stream"):
            raise ReplayError("a replay answers whole responses, not streams")
        if kwargs.get("messages") != call.messages:
            raise ReplayError(
                f"call {self._current} ({call.category}) sent a request that is not its "
                "recorded prompt (a modifier's revision?): the recording holds no answer to it"
            )
        self.requests += 1
        text, completion_tokens = call.answer, call.completion_tokens
        if self._answered:
            # The spread: the model's own further answers to this prompt, then the stream's
            # other calls with it (their token counts as recorded; a further answer's counted
            # only once drawn).
            spread: list[str | ReplayCall] = [*call.other_answers]
            spread += [self.calls[i] for i in self._fellows[self._current] if i != self._current]
            if spread:
                drawn = self._rng.choice(spread)
                if isinstance(drawn, str):
                    text, completion_tokens = drawn, count_tokens(drawn)[0]
                else:
                    text, completion_tokens = drawn.answer, drawn.completion_tokens
            self.drawn += 1
        self._answered = True
        tokens = {"prompt_tokens": call.prompt_tokens, "completion_tokens": completion_tokens}
        return ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-replay-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(call.time or 0),
                "model": call.model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {**tokens, "total_tokens": sum(tokens.values())},
            }
        )


# -- grading -------------------------------------------------------------------------------


def _numeric(calls: Iterable[ReplayCall]) -> bool:
    answers = [c.answer for c in calls]
    return bool(answers) and all(one_number(a) is not None for a in answers)


def equivalences_for(
    calls: Sequence[ReplayCall], config: CacheConfig | None = None
) -> dict[str, Equivalence]:
    """Each category's equivalence: the configuration's where it names one; else "within 1"
    (:class:`~llmcache.verification.Within`) for a category whose every answer holds one
    number, and :func:`~llmcache.verification.same_answer` for the rest."""
    by_category: dict[str, list[ReplayCall]] = defaultdict(list)
    for call in calls:
        by_category[call.category].append(call)
    out: dict[str, Equivalence] = {}
    for category, group in by_category.items():
        policy = (config.categories.get(category) if config else None) or CategoryPolicy()
        if policy.equivalence is not None:
            out[category] = policy.equivalence
        else:
            out[category] = Within(1) if _numeric(group) else same_answer
    return out


def with_equivalences(config: CacheConfig, equivalences: Mapping[str, Equivalence]) -> CacheConfig:
    """``config`` with each category's equivalence set, so that a wrong-hit budget labels its
    tables by the equivalence the replay grades by."""
    categories = dict(config.categories)
    for category, equivalence in equivalences.items():
        policy = categories.get(category, CategoryPolicy())
        if policy.equivalence is None:
            categories[category] = policy.model_copy(update={"equivalence": equivalence})
    return config.updated(categories=categories)


class CallResult(BaseModel):
    """How one replayed call was answered, graded against its true answer."""

    index: int
    category: str
    agent: str
    outcome: str
    #: The category the cache filed it under (a learned template's name, when it learned
    #: them); ``None`` when it passed through.
    filed_under: str | None = None
    #: On a hit, the agent whose call stored the answer served (another agent's: a crossing).
    served_from: str | None = None
    explored: bool = False
    audited: bool = False
    twin: bool = False
    identical: bool = False  # served as an answer stored for this very prompt (a guard's)
    cosine: float | None = None
    # The threshold in force when the call was looked up (a guard moves it), and whether it
    # had closed the table; None when no candidate was looked at.
    threshold: float | None = None
    closed: bool = False
    query: str
    served: str | None = None  # the cached answer, on a hit
    truth: str
    acceptable: bool | None = None  # of a served answer, by the category's equivalence
    cost_usd: float = 0.0
    baseline_usd: float = 0.0  # what the call cost without a cache

    @property
    def crossed(self) -> bool:
        """Whether it was a hit that served an answer another agent's call stored."""
        return self.served_from is not None and self.served_from != self.agent


class WrongHit(BaseModel):
    """A served answer its query's true answer does not accept."""

    index: int
    category: str
    agent: str
    cosine: float | None
    query: str
    served: str
    truth: str


class Figures(BaseModel):
    """Replay figures of one category, or of all. ``cost_cut`` is the fraction of the cost
    without a cache saved (negative: the cache cost more, e.g. in twins and explorations);
    ``excess`` and its 95% interval are in points (percent): the served answers' wrong rate
    minus the model's own disagreement on identical prompts; ``None`` when nothing was
    served. ``paired`` says it was measured on the served queries themselves, each served
    answer beside the model's recorded second answer to that query (``own_wrong_rate``: how
    often that second answer was unacceptable), rather than against the disagreement of every
    recorded pair. ``pairs`` are consecutive recorded answers to one prompt. ``explored``,
    ``audited`` and ``twins`` count the calls the proving guard explored, the audit guard
    audited and the guards asked twice (their cost is inside ``cost_usd``)."""

    calls: int = 0
    served: int = 0
    explored: int = 0
    audited: int = 0
    twins: int = 0
    acceptable: int = 0
    cost_cut: float = 0.0
    cost_usd: float = 0.0
    baseline_usd: float = 0.0
    pairs: int = 0
    pairs_agree: int = 0
    agreement: float | None = None
    wrong_rate: float | None = None
    excess: float | None = None
    excess_low: float | None = None
    excess_upper: float | None = None
    paired: bool = False
    own_wrong_rate: float | None = None
    # Of the served: answers stored for the very same prompt (the model's own answers to it,
    # excess 0 by construction), and the rest, near neighbours, with their wrong ones.
    identical: int = 0
    near_served: int = 0
    near_wrong: int = 0
    # The one-sided 95% upper bound of the expected excess of everything served, in points,
    # identical hits counted at their excess of 0 and near neighbours at their own bound
    # (docs/promise.md): what ``tune`` keeps within δ on its check part; ``expected`` is its
    # estimate, the near neighbours' excess weighted by their share (what tune chooses by).
    bound: float | None = None
    expected: float | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "served": self.served,
            "cost_cut": round(self.cost_cut, 6),
            "explored": self.explored,
            "audited": self.audited,
            "twins": self.twins,
            "acceptable": self.acceptable,
            "agreement": self.agreement,
            "excess": self.excess,
            "excess_low": self.excess_low,
            "excess_upper": self.excess_upper,
            "paired": self.paired,
            "own_wrong_rate": self.own_wrong_rate,
            "identical": self.identical,
            "near_served": self.near_served,
            "near_wrong": self.near_wrong,
            "bound": self.bound,
            "expected": self.expected,
        }


def _pairs(calls: Iterable[ReplayCall], equivalences: Mapping[str, Equivalence]) -> tuple[int, int]:
    """(pairs, agreeing pairs) of consecutive recorded answers to one prompt: each answer is in
    at most two pairs, so a prompt asked often does not count as many times its square; and
    each call's answer with each of its own ``other_answers``."""
    last: dict[str, ReplayCall] = {}
    pairs = agree = 0
    for call in calls:
        same = equivalences[call.category]
        for other in call.other_answers:
            pairs += 1
            agree += bool(same(call.answer, other))
        key = call.prompt_key()
        if key in last:
            pairs += 1
            agree += bool(equivalences[call.category](last[key].answer, call.answer))
        last[key] = call
    return pairs, agree


def figures(
    rows: Sequence[CallResult],
    calls: Sequence[ReplayCall],
    equivalences: Mapping[str, Equivalence],
) -> Figures:
    """The figures of ``rows`` (results of some replayed calls), whose calls are ``calls``
    (one per row, in the same order; :class:`~llmcache.errors.ReplayError` otherwise)."""
    if len(rows) != len(calls):
        raise ReplayError(
            f"figures: {len(rows)} results but {len(calls)} calls; pass each result's own call"
        )
    # Each served result with its own call: the paired excess grades the call's second answer.
    served_pairs = [(r, c) for r, c in zip(rows, calls, strict=True) if r.served is not None]
    served = [r for r, _ in served_pairs]
    wrong = sum(1 for r in served if not r.acceptable)
    cost = sum(r.cost_usd for r in rows)
    baseline = sum(r.baseline_usd for r in rows)
    pairs, agree = _pairs(calls, equivalences)
    out = Figures(
        calls=len(rows),
        served=len(served),
        explored=sum(r.explored for r in rows),
        audited=sum(r.audited for r in rows),
        twins=sum(r.twin for r in rows),
        acceptable=len(served) - wrong,
        cost_usd=cost,
        baseline_usd=baseline,
        cost_cut=1.0 - cost / baseline if baseline > 0 else 0.0,
        pairs=pairs,
        pairs_agree=agree,
        agreement=agree / pairs if pairs else None,
    )
    if not served:
        return out
    near = [r for r in served if not r.identical]
    near_wrong = sum(1 for r in near if not r.acceptable)
    bound = expected = 0.0
    if near:
        # Newcombe's one-sided 95% bound of the near neighbours' excess over every recorded
        # pair's disagreement, weighted by their share of what was served; the estimate alike.
        share = len(near) / len(served)
        near_high = excess_interval(near_wrong, len(near), pairs - agree, pairs, Z_ONE_SIDED)[1]
        bound = 100 * max(0.0, near_high) * share
        disagreement = (pairs - agree) / pairs if pairs else 0.0
        expected = 100 * (near_wrong / len(near) - disagreement) * share
    out = out.model_copy(
        update={
            "identical": len(served) - len(near),
            "near_served": len(near),
            "near_wrong": near_wrong,
            "bound": bound,
            "expected": expected,
        }
    )
    rate = wrong / len(served)
    if all(c.other_answers for _, c in served_pairs):
        # The same queries: each served answer beside the model's own second answer to it,
        # both graded against the true answer the same way.
        cells: Counter[tuple[bool, bool]] = Counter(
            (not r.acceptable, not equivalences[c.category](c.other_answers[0], c.answer))
            for r, c in served_pairs
        )  # (served answer wrong, second answer wrong)
        low, high = paired_excess_interval(
            cells[True, True], cells[True, False], cells[False, True], cells[False, False]
        )
        own = (cells[True, True] + cells[False, True]) / len(served)
        paired = True
    else:
        disagree = pairs - agree
        low, high = excess_interval(wrong, len(served), disagree, pairs)
        own = disagree / pairs if pairs else 0.0
        paired = False
    return out.model_copy(
        update={
            "wrong_rate": rate,
            "excess": 100 * (rate - own),
            "excess_low": 100 * low,
            "excess_upper": 100 * high,
            "paired": paired,
            "own_wrong_rate": own,
        }
    )


class ReplayReport(BaseModel):
    """What a replay measured: overall and per category (see :class:`Figures`), the wrong
    hits for a person to read, and the calls one by one."""

    overall: Figures
    categories: dict[str, Figures]
    wrong_hits: list[WrongHit] = Field(default_factory=list)
    results: list[CallResult] = Field(default_factory=list)
    skipped: dict[str, int] = Field(default_factory=dict)
    equivalences: dict[str, str] = Field(default_factory=dict)
    seed: int | None = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The figures as one JSON object: ``calls``, ``served``, ``cost_cut`` (a fraction),
        ``excess`` and ``excess_upper`` (points) … overall, and the same per category under
        ``categories``."""
        return {
            **self.overall.summary(),
            "categories": {name: f.summary() for name, f in sorted(self.categories.items())},
            "wrong_hits": len(self.wrong_hits),
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
        }

    def render(self, wrong_hits: int = 20) -> str:
        """A table for people, then up to ``wrong_hits`` wrong hits."""

        def points(value: float | None) -> str:
            return "-" if value is None else f"{value:+.1f}"

        def line(name: str, f: Figures) -> str:
            agree = "-" if f.agreement is None else f"{100 * f.agreement:.1f}% of {f.pairs}"
            ok = f"{f.acceptable}/{f.served}" if f.served else "-"
            interval = (
                f"{points(f.excess)} [{points(f.excess_low)}, {points(f.excess_upper)}]"
                if f.served
                else "- (nothing served)"
            )
            return (
                f"{name[:28]:<28} {f.calls:>6} {f.served:>6} {100 * f.cost_cut:>8.1f}% "
                f"{ok:>11} {agree:>15}  {interval}"
            )

        head = (
            f"{'category':<28} {'calls':>6} {'served':>6} {'cost cut':>9} {'acceptable':>11} "
            f"{'model agrees':>15}  excess, points [95%]"
        )
        lines = [head] + [line(n, f) for n, f in sorted(self.categories.items())]
        lines.append(line("all", self.overall))
        o = self.overall
        if o.explored or o.audited or o.twins:
            # What keeping a budget asked on top (inside the cost above).
            lines.append(
                f"asked beside the served answers: {o.explored} explored, {o.audited} audited, "
                f"{o.twins} asked twice"
            )
        if self.equivalences:
            named = ", ".join(f"{c}: {e}" for c, e in sorted(self.equivalences.items()))
            lines.append(f"equivalences: {named}")
        if self.skipped:
            left = ", ".join(f"{n} {why}" for why, n in self.skipped.items())
            lines.append(f"left out of the replay: {left}")
        if self.wrong_hits:
            lines.append(f"wrong hits ({len(self.wrong_hits)}):")
            for hit in self.wrong_hits[:wrong_hits]:
                cos = "-" if hit.cosine is None else f"{hit.cosine:.3f}"
                lines.append(f"  #{hit.index} {hit.category}/{hit.agent} cosine {cos}")
                lines.append(f"    query:  {_short(hit.query)}")
                lines.append(f"    served: {_short(hit.served)}   true: {_short(hit.truth)}")
            if len(self.wrong_hits) > wrong_hits:
                lines.append(f"  … and {len(self.wrong_hits) - wrong_hits} more")
        return "\n".join(lines)


def _short(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _name(equivalence: Equivalence) -> str:
    named = equivalence_name(equivalence)
    return named if named is not None else str(getattr(equivalence, "__name__", "custom"))


# -- running -------------------------------------------------------------------------------


def options_for(call: ReplayCall, slots: Sequence[str] | None = None) -> CacheOptions:
    """The cache options a recorded call is replayed with: its category, agent and keywords
    (its slot values when it gave slots only). ``slots`` names the slots whose values are the
    keywords instead, for a call that carries them (a keyword-slot choice being tried; a call
    with none of them keeps its own). A call without keywords is embedded by its whole prompt,
    as a recognised template without slots is."""
    keywords = call.keywords
    chosen = [call.slots[name] for name in slots or () if call.slots and name in call.slots]
    if chosen:
        keywords = chosen
    elif keywords is None and call.slots:
        keywords = list(call.slots.values())
    if not keywords or not any(k.strip() for k in keywords):
        return CacheOptions(category=call.category, agent=call.agent, embed=EmbedMode.FULL)
    return CacheOptions(category=call.category, agent=call.agent, keywords=tuple(keywords))


def embedding_texts(calls: Iterable[ReplayCall], modes: Iterable[EmbedMode]) -> list[str]:
    """The texts replays of ``calls`` in the embed ``modes`` look up, each once (to embed them
    in batches before, e.g. with :meth:`~llmcache.embedders.StoredEmbedder.warm`); in keyword
    mode, those of every single slot a call carries as well (the choices ``tune`` tries)."""
    wanted = set(modes)
    texts: dict[str, None] = {}
    for call in calls:
        options = options_for(call)
        if EmbedMode.KEYWORD in wanted and options.keywords:
            texts[embedding_text(EmbedMode.KEYWORD, options, call.messages)] = None
            for name in call.slots or {}:
                one = options_for(call, (name,))
                texts[embedding_text(EmbedMode.KEYWORD, one, call.messages)] = None
        if EmbedMode.FULL in wanted or not options.keywords:
            texts[embedding_text(EmbedMode.FULL, options, call.messages)] = None
    return list(texts)


def load_config(config: CacheConfig | str | os.PathLike[str] | None) -> CacheConfig:
    """A configuration given as itself, as a file, or not at all (the defaults)."""
    if config is None:
        return CacheConfig()
    if isinstance(config, CacheConfig):
        return config
    return CacheConfig.from_file(config)


def replay(
    calls: Sequence[ReplayCall] | ReplayInput,
    config: CacheConfig | str | os.PathLike[str] | None = None,
    *,
    embedder: Embedder | None = None,
    seed: int | None = 0,
    prices: PriceTable | None = None,
    keyword_slots: Mapping[str, Sequence[str]] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    learn_templates: bool | TemplateLearner = False,
) -> ReplayReport:
    """Replay ``calls`` in order through a fresh cache (a temporary directory) configured by
    ``config`` (a :class:`~llmcache.CacheConfig` or a file; default: the defaults), the
    recording answering as the model (:class:`RecordedUpstream`, seeded by ``seed``, which
    also seeds the cache's explorations where ``config`` sets no ``explore_seed``).

    ``cache_dir``: replay into this cache directory instead, created if absent and kept: a
    cache that already holds earlier runs' answers and evidence (labels, pairs, the guards'
    state) starts from them, as a live cache reopened for the next run does, and keeps what
    this replay adds for the next one.

    Pass a :class:`~llmcache.embedders.StoredEmbedder` as ``embedder`` to embed each text once
    across replays (default: :func:`~llmcache.embedders.default_embedder`).
    ``keyword_slots`` names, per category, the slots whose values are the keywords of the calls
    that carry slots (what a template's ``keyword_slots`` says in live use; see
    :func:`options_for`).

    ``learn_templates``: send the calls as agent code that declares nothing would (no cache
    options: no category, agent or keywords), the cache filing them under templates it learns
    from the traffic (``CachedLLM(learn_templates=...)``; a
    :class:`~llmcache.templates.TemplateLearner` to keep or inspect what was learned). The
    report's categories are still the recorded ones, so that the two ways compare per category.
    """
    skipped: dict[str, int] = {}
    if isinstance(calls, ReplayInput):
        skipped = dict(calls.skipped)
        calls = calls.calls
    calls = list(calls)
    base = load_config(config)
    if base.explore_seed is None and seed is not None:
        base = base.updated(explore_seed=seed)
    equivalences = equivalences_for(calls, base)
    effective = with_equivalences(base, equivalences)
    prices = prices or PriceTable()
    upstream = RecordedUpstream(calls, seed)
    clock_now = [0.0]
    results: list[CallResult] = []
    owners: dict[tuple[str | None, int | None], str] = {}
    # Learning templates, the agent of each prompt the model answered (by its messages): its
    # answer may be filed late (llmcache/_late.py), under no entry id of its own call's.
    asked_by: dict[str, str] = {}
    learning = learn_templates is not False
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        where = (
            os.fspath(cache_dir)
            if cache_dir is not None
            else stack.enter_context(tempfile.TemporaryDirectory(prefix="llmcache-replay-"))
        )
        cache = SemanticCache(
            where, embedder=embedder, config=effective, prices=prices, clock=lambda: clock_now[0]
        )
        with CachedLLM(upstream, cache, learn_templates=learn_templates) as client:
            for index, call in enumerate(calls):
                clock_now[0] = call.time if call.time is not None else float(index)
                upstream.ask(index)
                options = (
                    None
                    if learn_templates is not False
                    else options_for(call, (keyword_slots or {}).get(call.category))
                )
                try:
                    # Learned under the site the call was recorded from, as the live client
                    # learned it (a recording without sites: one site, the text alone).
                    with code_site(call.site) if call.site else text_alone():
                        text, info = _answer(client, call, options, prices)
                except LLMCacheError as exc:
                    raise ReplayError(f"call {index} ({call.category}) failed: {exc}") from exc
                # Whose call stored each entry, so that a hit says whose answer it served.
                entry = (info.partition_key, info.entry_id)
                if info.outcome != "hit" and info.entry_id is not None:
                    owners[entry] = call.agent
                if learning and info.outcome != "hit":
                    asked_by.setdefault(_asked(call.messages), call.agent)
                served_from = None
                if info.outcome == "hit":
                    served_from = (
                        owners[entry] if entry in owners else _filed_late_by(cache, entry, asked_by)
                    )
                baseline = prices.cost(call.model, _usage(call))
                equivalence = equivalences[call.category]
                results.append(_result(index, call, text, info, equivalence, served_from, baseline))
    return report_of(results, calls, equivalences, skipped=skipped, seed=seed).model_copy(
        update={"seconds": time.perf_counter() - started}
    )


def _asked(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)


def _filed_late_by(
    cache: SemanticCache, entry: tuple[str | None, int | None], asked_by: Mapping[str, str]
) -> str | None:
    """Whose call a hit's entry answered, when its answer was filed late (passed through while
    its template was learned, or filed before it changed): read from the prompt it holds."""
    key, entry_id = entry
    if key is None or entry_id is None or not asked_by:
        return None
    stored = cache.backend.get(key, entry_id)
    return asked_by.get(_asked(stored.messages)) if stored is not None else None


def _result(
    index: int,
    call: ReplayCall,
    text: str,
    info: CallInfo,
    equivalence: Equivalence,
    served_from: str | None,
    baseline_usd: float,
) -> CallResult:
    """One replayed call's result (``served_from``: whose call stored the answer a hit served;
    ``baseline_usd``: what the call costs without a cache)."""
    hit = info.outcome == "hit"
    return CallResult(
        index=index,
        category=call.category,
        agent=call.agent,
        outcome=info.outcome,
        filed_under=info.category if info.outcome != "bypass" else None,
        explored=info.explored,
        audited=info.audited,
        twin=info.twin,
        identical=info.identical,
        cosine=info.similarity.cosine if info.similarity else None,
        threshold=info.threshold,
        closed=info.threshold is not None and closes(info.threshold),
        query=info.embed_text or "",
        served=text if hit else None,
        truth=call.answer,
        acceptable=equivalence(text, call.answer) if hit else None,
        cost_usd=info.cost_usd,
        served_from=served_from,
        baseline_usd=baseline_usd,
    )


def _usage(call: ReplayCall) -> Usage:
    """What the recorded call spent: what it costs without a cache."""
    return Usage(prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens)


def _answer(
    client: CachedLLM, call: ReplayCall, options: CacheOptions | None, prices: PriceTable
) -> tuple[str, CallInfo]:
    """One call sent on, under ``options``; or (``None``) as agent code that declares nothing
    sends it: filed by the client's learner, or passed through (a bypass, at the model's
    price)."""
    completions = client.chat.completions
    if options is None:
        options = completions.file_call(messages=call.messages, **call.params)
        if options is None:
            response = completions.create(messages=call.messages, cache=False, **call.params)
            cost = prices.cost(call.model, _usage(call))
            info = CallInfo(outcome="bypass", category=call.category, cost_usd=cost)
            return response.choices[0].message.content or "", info
    response, info = completions.create_with_info(
        messages=call.messages, **call.params, cache=options
    )
    return response.choices[0].message.content or "", info


def report_of(
    results: Sequence[CallResult],
    calls: Sequence[ReplayCall],
    equivalences: Mapping[str, Equivalence],
    *,
    skipped: Mapping[str, int] | None = None,
    seed: int | None = 0,
) -> ReplayReport:
    """The report of some replayed calls (``results[i]`` is the result of ``calls[i]``)."""
    by_category: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(results):
        by_category[row.category].append(i)
    categories = {
        name: figures([results[i] for i in idx], [calls[i] for i in idx], equivalences)
        for name, idx in by_category.items()
    }
    wrong = [
        WrongHit(
            index=r.index,
            category=r.category,
            agent=r.agent,
            cosine=r.cosine,
            query=r.query,
            served=r.served,
            truth=r.truth,
        )
        for r in results
        if r.served is not None and not r.acceptable
    ]
    return ReplayReport(
        overall=figures(results, calls, equivalences),
        categories=categories,
        wrong_hits=wrong,
        results=list(results),
        skipped=dict(skipped or {}),
        equivalences={c: _name(e) for c, e in equivalences.items() if c in by_category},
        seed=seed,
    )
