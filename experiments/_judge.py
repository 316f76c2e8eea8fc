"""Judges: rank the candidate answers to one query prompt, best first.

A :class:`JudgeQuery` holds a prompt an agent asked, the response the LLM really gave, and the
candidates to rank (the best cached answer of each similarity region, a random one, the true
response itself, ...). A :class:`Judge` turns it into a :class:`Judgement`: one rank per
candidate label, the orders it actually obtained, and how far those orders agreed. Many
judgements make the TrueSkill ratings of :mod:`experiments._trueskill`.

Two judges exist:

- :class:`LLMJudge` asks an LLM to rank the shuffled candidates (the study's appendix D.4
  prompt), once in a seeded shuffled order and once in exactly the reverse order, so a judge
  that prefers a position rather than an answer shows up as ties and a low ``agreement``.
- :class:`ReferenceJudge` needs no LLM: it ranks by closeness to the true response (field by
  field for JSON answers, by embedding for text). Deterministic, so it also checks the LLM.

A judge never raises for a bad answer from its LLM: the judgement comes back ``failed=True``
with the error, so a failure is counted in the results instead of silently dropped.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from statistics import fmean
from typing import Any, Protocol, runtime_checkable

import numpy as np
import openai
from numpy.typing import NDArray
from pydantic import BaseModel, Field, model_validator

from ._results import JudgeReliability, PairShare
from ._stats import wilson_interval

__all__ = [
    "RANDOM_LABEL",
    "REFERENCE_NAME",
    "TRUE_LABEL",
    "Judge",
    "JudgeCandidate",
    "JudgeQuery",
    "Judgement",
    "LLMJudge",
    "ReferenceJudge",
    "TextEmbedder",
    "failed_judgement",
    "fractional_ranks",
    "pair_share",
    "pairwise_agreement",
    "ranking_prompt",
    "reliability",
    "score_tiers",
    "scored_judgement",
    "split_candidates",
    "truncate_text",
]

TRUE_LABEL = "true"
# The candidate drawn at random from the query's own table (the direct comparison has one):
# the true answer against it is the judge's test against chance.
RANDOM_LABEL = "random"
REFERENCE_NAME = "reference"


class JudgeCandidate(BaseModel):
    """One answer to rank. ``text=None`` is an empty region: nothing to show, ranks last."""

    label: str
    text: str | None


class JudgeQuery(BaseModel):
    """One query prompt and the candidate answers a judge ranks for it."""

    query_id: str
    category: str
    group: str
    prompt: str  # the user message, as the agent asked it
    truth: str  # the response the LLM really gave
    candidates: list[JudgeCandidate]  # the true response is normally one of them, label "true"

    @model_validator(mode="after")
    def _unique_labels(self) -> JudgeQuery:
        labels = [c.label for c in self.candidates]
        if len(set(labels)) != len(labels):
            raise ValueError(f"candidate labels must be unique, got {labels}")
        return self


class Judgement(BaseModel):
    """A judge's ranking of one query's candidates."""

    query_id: str
    group: str
    judge: str
    # label -> rank, 1 = best; equal ranks are ties. Empty candidates share the worst ranks
    # (fractional ranking: 3 empties behind 2 answers all get 4.0). Empty when ``failed``.
    ranks: dict[str, float] = Field(default_factory=dict)
    # The label order of every ranking actually obtained, best first (empties never included).
    presentations: list[list[str]] = Field(default_factory=list)
    failed: bool = False
    error: str | None = None
    # Fraction of pairs of non-empty candidates that every presentation orders the same way;
    # None when fewer than two presentations (or fewer than two non-empty candidates).
    agreement: float | None = None
    # Labels without a candidate: their last place is given, not judged, so comparisons of
    # judges leave them out.
    empty: list[str] = Field(default_factory=list)
    # Single-order reversal check: candidate pairs one presentation and its exact reverse
    # both ordered, and how many of them they ordered the same way (a tie in either order
    # counts half). 0 pairs when no reversed presentation was obtained.
    reversal_pairs: int = 0
    reversal_same: float = 0.0


@runtime_checkable
class Judge(Protocol):
    """Ranks the candidates of a query. Returns ``failed=True`` rather than raising."""

    @property
    def name(self) -> str: ...

    def judge(self, query: JudgeQuery) -> Judgement: ...


@runtime_checkable
class TextEmbedder(Protocol):
    """What :class:`ReferenceJudge` needs of an embedder (llmcache's ``Embedder`` fits)."""

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Rows L2-normalised, shape ``(len(texts), dim)``."""
        ...


# --------------------------------------------------------------------------- shared helpers


def fractional_ranks(order: Sequence[Sequence[str]]) -> dict[str, float]:
    """Ranks of tiers given best first: a tier of ``k`` labels after ``p`` labels gets the
    mean of positions ``p+1 .. p+k``, so rank sums stay ``n(n+1)/2`` whatever ties there are."""
    ranks: dict[str, float] = {}
    placed = 0
    for tier in order:
        if not tier:
            continue
        rank = placed + (len(tier) + 1) / 2
        for label in tier:
            ranks[label] = rank
        placed += len(tier)
    return ranks


def score_tiers(scores: dict[str, float]) -> list[list[str]]:
    """Group labels of equal score, highest first; within a tier, the input order is kept."""
    by_score: dict[float, list[str]] = defaultdict(list)
    for label, score in scores.items():
        by_score[score].append(label)
    return [by_score[s] for s in sorted(by_score, reverse=True)]


def split_candidates(query: JudgeQuery) -> tuple[list[JudgeCandidate], list[str]]:
    present = [c for c in query.candidates if c.text is not None]
    empty = [c.label for c in query.candidates if c.text is None]
    return present, empty


# --------------------------------------------------------------------------- the LLM judge

_DEFAULT_MAX_CHARS = 1200
_FEEDBACK_CHARS = 200  # of an invalid answer echoed back on a retry


def failed_judgement(query: JudgeQuery, judge: str, error: str) -> Judgement:
    """``judge``'s judgement of ``query`` when it could not rank: counted, never guessed."""
    return Judgement(
        query_id=query.query_id,
        group=query.group,
        judge=judge,
        failed=True,
        error=error,
        empty=split_candidates(query)[1],
    )


def scored_judgement(
    query: JudgeQuery, judge: str, scores: dict[str, float], **extra: Any
) -> Judgement:
    """``judge``'s judgement of ``query`` from a score per present candidate (higher is
    better, equal scores tie, empty candidates last); ``extra`` sets further fields."""
    tiers = score_tiers(scores)
    empty = split_candidates(query)[1]
    return Judgement(
        query_id=query.query_id,
        group=query.group,
        judge=judge,
        ranks=fractional_ranks([*tiers, empty]),
        presentations=[[label for tier in tiers for label in tier]] if scores else [],
        empty=empty,
        **extra,
    )


def truncate_text(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + " […]"


def ranking_prompt(prompt: str, responses: Sequence[str], *, max_chars: int = 1200) -> str:
    """The study's ranking prompt: the character's task, numbered responses, the instruction.

    Each response is cut to ``max_chars`` characters: a rambling candidate must not push the
    others (or the instruction) out of a small model's context window.
    """
    n = len(responses)
    blocks = "\n\n".join(
        f"Response {i}: {truncate_text(text, max_chars)}" for i, text in enumerate(responses, 1)
    )
    # The example is a fixed rotation (n, 1, 2, ...), never the identity: an example that
    # reads "1, 2, 3" would invite the model to copy the presented order.
    example = json.dumps({"ranking": [n, *range(1, n)] if n > 1 else [1]})
    return (
        "A character in a simulated town was given the following task prompt:\n\n"
        f"{prompt}\n\n"
        f"Here are {n} candidate responses to it.\n\n"
        f"{blocks}\n\n"
        "Rank the responses from best to worst by how well and how plausibly each one answers "
        "the prompt for that character. Answer only with JSON like "
        f"{example}: the ranking lists each response number from 1 to {n} exactly once, "
        "best first."
    )


def _response_format(n: int) -> dict[str, Any]:
    # llama.cpp's server turns this schema into a grammar, so a small model can only emit a
    # permutation-shaped answer; OpenAI's strict structured outputs accept it as well. The
    # schema cannot forbid repeated numbers, so the parser still checks for a permutation.
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "ranking",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "ranking": {
                        "type": "array",
                        "items": {"type": "integer", "enum": list(range(1, n + 1))},
                        "minItems": n,
                        "maxItems": n,
                    }
                },
                "required": ["ranking"],
                "additionalProperties": False,
            },
        },
    }


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class _InvalidRanking(ValueError):
    pass


def _parse_ranking(content: str | None, n: int) -> list[int]:
    """The 1-based response numbers, best first; raises :class:`_InvalidRanking`.

    The whole answer must be the JSON object (a Markdown code fence around it is tolerated):
    prose around it means the model did not follow the format, and guessing which bracket it
    meant would turn a misunderstanding into a ranking.
    """
    if content is None:
        raise _InvalidRanking("empty answer")
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _InvalidRanking(f"not JSON ({exc.msg}): {content[:80]!r}") from None
    if not isinstance(data, dict) or "ranking" not in data:
        raise _InvalidRanking(f'no "ranking" key: {content[:80]!r}')
    ranking = data["ranking"]
    if not isinstance(ranking, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in ranking
    ):
        raise _InvalidRanking(f"ranking is not a list of integers: {ranking!r}")
    if sorted(ranking) != list(range(1, n + 1)):
        raise _InvalidRanking(f"ranking is not a permutation of 1..{n}: {ranking!r}")
    return list(ranking)


class LLMJudge:
    """Ranks candidates with an LLM, with position-bias control.

    The non-empty candidates are presented ``shuffles`` times: presentation 1 in a shuffled
    order seeded by ``f"{seed}:{query_id}"`` (so reruns ask the same questions), presentation 2
    in exactly the reverse order (every candidate sits in the mirrored position), further
    presentations in new shuffles of the same seeded generator. Each answer must be a JSON
    permutation of the response numbers; an invalid one is retried (with the error fed back)
    up to ``max_attempts`` times, after which that presentation is dropped. If no presentation
    yields a valid ranking the judgement is ``failed`` with the last error.

    Combining presentations: a candidate's rank is the mean of its 1-based positions over the
    valid presentations. A candidate the LLM put first in one order and last in the mirrored
    one therefore ties with the candidate it swapped with: pure position preference ends up as
    ties, not as a verdict. ``agreement`` is the fraction of candidate pairs that every valid
    presentation orders the same way (None with a single valid presentation). Empty candidates
    are never shown and share the ranks after all others. With a single non-empty candidate
    there is nothing to ask: it ranks 1 without an LLM call.

    ``client`` is any OpenAI-compatible client (``openai.OpenAI``, llmcache's ``CachedLLM``, a
    local server's client, ``llmcache.testing.FakeOpenAI``). API errors (connection refused,
    context overflow, ...) count as failed attempts, like invalid answers.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        shuffles: int = 2,
        seed: int = 0,
        max_attempts: int = 2,
        max_tokens: int = 64,
        temperature: float | None = None,
        max_chars: int = _DEFAULT_MAX_CHARS,
        name: str | None = None,
    ) -> None:
        if shuffles < 1:
            raise ValueError(f"shuffles must be >= 1, got {shuffles}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self._client = client
        self.model = model
        self.shuffles = shuffles
        self.seed = seed
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_chars = max_chars
        self._name = name or f"llm:{model}"

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"LLMJudge(model={self.model!r}, shuffles={self.shuffles}, seed={self.seed})"

    def presentation_orders(self, query: JudgeQuery) -> list[list[str]]:
        """The label orders the candidates are shown in (deterministic per seed and query)."""
        labels = [c.label for c in query.candidates if c.text is not None]
        rng = random.Random(f"{self.seed}:{query.query_id}")
        first = list(labels)
        rng.shuffle(first)
        orders = [first]
        if self.shuffles >= 2:
            orders.append(first[::-1])
        for _ in range(self.shuffles - 2):
            order = list(labels)
            rng.shuffle(order)
            orders.append(order)
        return orders

    def _ask(self, messages: list[dict[str, str]], n: int) -> str | None:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "response_format": _response_format(n),
            "max_tokens": self.max_tokens,
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        completion = self._client.chat.completions.create(**kwargs)
        content = completion.choices[0].message.content
        return content if isinstance(content, str) else None

    def _rank_once(self, query: JudgeQuery, order: list[str]) -> tuple[list[str] | None, str]:
        """One presentation: the labels best first, or None and the last error."""
        texts = {c.label: c.text or "" for c in query.candidates}
        n = len(order)
        base = [
            {
                "role": "user",
                "content": ranking_prompt(
                    query.prompt, [texts[label] for label in order], max_chars=self.max_chars
                ),
            }
        ]
        messages = base
        error = ""
        for _ in range(self.max_attempts):
            try:
                content = self._ask(messages, n)
            except openai.APIError as exc:
                error = f"{type(exc).__name__}: {exc}"
                messages = base
                continue
            try:
                ranking = _parse_ranking(content, n)
            except _InvalidRanking as exc:
                error = str(exc)
                # Telling the model what was wrong helps an unconstrained model; under a
                # grammar it changes nothing but costs little.
                messages = [
                    *base,
                    {"role": "assistant", "content": (content or "")[:_FEEDBACK_CHARS]},
                    {
                        "role": "user",
                        "content": f"That answer is invalid: {error}. Answer again with only "
                        f'the JSON object {{"ranking": [...]}} listing 1 to {n} once each.',
                    },
                ]
                continue
            return [order[i - 1] for i in ranking], ""
        return None, error

    def judge(self, query: JudgeQuery) -> Judgement:
        present, empty = split_candidates(query)
        if len(present) <= 1:
            labels = [c.label for c in present]
            return Judgement(
                query_id=query.query_id,
                group=query.group,
                judge=self.name,
                ranks=fractional_ranks([labels, empty]),
                presentations=[labels] if labels else [],
                agreement=None,
                empty=empty,
            )
        obtained: list[list[str]] = []
        error = ""
        first_two: list[list[str] | None] = []
        for i, order in enumerate(self.presentation_orders(query)):
            ranked, err = self._rank_once(query, order)
            if i < 2:
                first_two.append(ranked)
            if ranked is None:
                error = err
            else:
                obtained.append(ranked)
        reversal_pairs, reversal_same = 0, 0.0
        if len(first_two) == 2 and first_two[0] is not None and first_two[1] is not None:
            # Presentation 2 is presentation 1 reversed: the single-order reversal check.
            reversal_same, reversal_pairs = _order_counts(first_two[0], first_two[1])
        if not obtained:
            return failed_judgement(query, self.name, error or "no valid ranking")
        mean_pos = {c.label: fmean(p.index(c.label) + 1 for p in obtained) for c in present}
        # Mean positions already behave like fractional ranks (n candidates' means always sum
        # to n(n+1)/2, equal means are ties); the empties share the places after them.
        ranks = dict(mean_pos)
        ranks.update(dict.fromkeys(empty, len(present) + (len(empty) + 1) / 2))
        return Judgement(
            query_id=query.query_id,
            group=query.group,
            judge=self.name,
            ranks=ranks,
            presentations=obtained,
            agreement=_presentation_agreement(obtained) if len(obtained) > 1 else None,
            empty=empty,
            reversal_pairs=reversal_pairs,
            reversal_same=reversal_same,
        )


def _order_counts(a: Sequence[str], b: Sequence[str]) -> tuple[float, int]:
    """Pairs of labels two strict orders (best first) order the same way, and all pairs."""
    pos_a = {label: i for i, label in enumerate(a)}
    pos_b = {label: i for i, label in enumerate(b)}
    pairs = list(itertools.combinations([x for x in a if x in pos_b], 2))
    same = sum(1 for x, y in pairs if (pos_a[x] < pos_a[y]) == (pos_b[x] < pos_b[y]))
    return float(same), len(pairs)


def _presentation_agreement(orders: Sequence[Sequence[str]]) -> float | None:
    labels = list(orders[0])
    pairs = list(itertools.combinations(labels, 2))
    if not pairs:
        return None
    positions = [{label: i for i, label in enumerate(o)} for o in orders]
    same = sum(
        1
        for a, b in pairs
        if len({pos[a] < pos[b] for pos in positions}) == 1  # every order says the same
    )
    return same / len(pairs)


# --------------------------------------------------------------------------- reference judge

# Scores are rounded before ranking: float32 embeddings of equal content can differ in the
# last bits, and such noise must not order two equally close candidates.
_SCORE_DIGITS = 9


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# A field's score is either known at once or needs the embedding cosine of two texts.
_Part = float | tuple[str, str]


def _field_part(truth: Any, value: Any) -> _Part:
    if truth == value and type(truth) is type(value):
        return 1.0
    if _is_number(truth) and _is_number(value):
        gap = float(abs(truth - value)) / float(max(abs(truth), abs(value), 1.0))
        return max(0.0, 1.0 - gap)
    if isinstance(truth, str) and isinstance(value, str):
        return (truth, value)
    if isinstance(truth, list | dict) or isinstance(value, list | dict):
        # Lists (and nested objects) are compared as their JSON texts, by meaning.
        return (_json_text(truth), _json_text(value))
    # Booleans, nulls and mismatched scalars: only equality counts.
    return 0.0


def _json_text(x: Any) -> str:
    return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, sort_keys=True)


def _json_number(text: str) -> float | None:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return None
    return float(data) if _is_number(data) else None


def _parts(truth: str, text: str) -> list[_Part]:
    if text == truth:
        return [1.0]
    t_num, c_num = _json_number(truth), _json_number(text)
    if t_num is not None and c_num is not None:
        # Plain numbers (a bare rating) are compared as numbers, not as texts.
        return [_field_part(t_num, c_num)]
    t_obj, c_obj = _json_object(truth), _json_object(text)
    if t_obj and c_obj is not None:
        return [_field_part(v, c_obj[k]) if k in c_obj else 0.0 for k, v in t_obj.items()]
    return [(truth, text)]


class ReferenceJudge:
    """Ranks candidates by closeness to the true response; deterministic, no LLM.

    Plain numbers (truth and candidate both): ``1 - |a-b| / max(|a|, |b|, 1)``, as a field.
    Structured answers (truth and candidate both JSON objects): the score is the mean over the
    truth's top-level fields of a field score: numbers ``1 - |a-b| / max(|a|, |b|, 1)`` (at
    least 0), equal values 1, strings (and lists or nested objects, as JSON text) the
    embedding cosine mapped to [0, 1] as ``(cos + 1) / 2``, a missing field or unequal
    booleans/nulls 0. Free text (either side not a JSON object): ``(cos + 1) / 2`` of the
    whole texts. Higher scores rank better; equal scores tie; empty candidates rank last.

    The true response scores 1 against itself, so "true" always ranks first here (tied only
    with a candidate that also scores 1, such as an identical text): this judge measures
    closeness to the truth, not quality, and "true" is its anchor, not a finding.
    ``embedder`` is anything with ``embed(texts) -> (n, dim)`` L2-normalised float32 rows,
    e.g. llmcache's ``MiniLMEmbedder``.
    """

    def __init__(self, embedder: TextEmbedder, *, name: str = REFERENCE_NAME) -> None:
        self._embedder = embedder
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"ReferenceJudge({self._embedder!r}, name={self._name!r})"

    def scores(self, query: JudgeQuery) -> dict[str, float]:
        """Each non-empty candidate's closeness to the truth, in [0, 1]."""
        present, _ = split_candidates(query)
        parts = {c.label: _parts(query.truth, c.text or "") for c in present}
        texts = sorted({t for ps in parts.values() for p in ps if isinstance(p, tuple) for t in p})
        # One embed call per query: batching is what makes a local embedder fast.
        vectors = self._embedder.embed(texts) if texts else None
        row = {t: i for i, t in enumerate(texts)}

        def value(part: _Part) -> float:
            if not isinstance(part, tuple):
                return part
            if part[0] == part[1]:
                return 1.0
            assert vectors is not None
            cos = float(np.dot(vectors[row[part[0]]], vectors[row[part[1]]]))
            return (min(1.0, max(-1.0, cos)) + 1.0) / 2.0

        return {
            label: round(fmean(value(p) for p in ps) if ps else 1.0, _SCORE_DIGITS)
            for label, ps in parts.items()
        }

    def judge(self, query: JudgeQuery) -> Judgement:
        _, empty = split_candidates(query)
        tiers = score_tiers(self.scores(query))
        return Judgement(
            query_id=query.query_id,
            group=query.group,
            judge=self.name,
            ranks=fractional_ranks([*tiers, empty]),
            presentations=[[label for tier in tiers for label in tier]],
            agreement=None,
            empty=empty,
        )


# --------------------------------------------------------------------------- reliability


def _agreement_counts(a: Judgement, b: Judgement) -> tuple[int, int]:
    """Label pairs the two judgements order the same way, and the pairs compared."""
    skip = set(a.empty) | set(b.empty)
    labels = [x for x in a.ranks if x in b.ranks and x not in skip]
    same = total = 0
    for x, y in itertools.combinations(labels, 2):
        da, db = a.ranks[x] - a.ranks[y], b.ranks[x] - b.ranks[y]
        if da == 0 or db == 0:
            continue
        total += 1
        same += (da < 0) == (db < 0)
    return same, total


def pairwise_agreement(a: Judgement, b: Judgement) -> float | None:
    """Fraction of label pairs the two judgements order the same way.

    Only labels ranked in both count, minus the empty ones (their last place is given, so
    every judge "agrees" on them); a pair tied in either judgement is left out. None when no
    pair is left (e.g. either judgement failed).
    """
    same, total = _agreement_counts(a, b)
    return same / total if total else None


def pair_share(score: float, pairs: int) -> PairShare:
    """``score`` of ``pairs`` (a tie counted half) with its 95% Wilson interval."""
    low, high = wilson_interval(score, pairs)
    return PairShare(
        score=score, pairs=pairs, rate=score / pairs if pairs else None, low=low, high=high
    )


def _true_over_random(judgements: Iterable[Judgement]) -> PairShare | None:
    """How often the true answer ranks above the random same-table one (a tie counts half).

    Only judgements that show both (neither empty) count; None when no judgement has a
    random candidate, so a result without one says "not measured" rather than 0 of 0.
    """
    score, pairs = 0.0, 0
    for j in judgements:
        if TRUE_LABEL not in j.ranks or RANDOM_LABEL not in j.ranks:
            continue
        if TRUE_LABEL in j.empty or RANDOM_LABEL in j.empty:
            continue
        pairs += 1
        t, r = j.ranks[TRUE_LABEL], j.ranks[RANDOM_LABEL]
        score += 1.0 if t < r else 0.5 if t == r else 0.0
    return pair_share(score, pairs) if pairs else None


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return fmean(kept) if kept else None


def reliability(
    judge_name: str,
    judgements: Sequence[Judgement],
    *,
    other: dict[str, list[Judgement]] | None = None,
) -> JudgeReliability:
    """How far ``judgements`` (all by one judge) can be trusted.

    - ``shuffle_agreement``: mean ``agreement`` over the judgements that have one.
    - ``agreement_with[name]``: mean :func:`pairwise_agreement` with the other judge's
      judgement of the same ``query_id`` (if a query_id repeats, the k-th judgements of it are
      paired); judges without a single comparable pair are left out.
    - ``true_mean_rank`` / ``true_first_rate``: the rank of label "true" and how often it was
      strictly first (a tie for first does not count: a judge that ties everything must not
      look like it always finds the truth).

    Judge quality, each with its 95% Wilson interval (:class:`PairShare`):

    - ``reversal``: over the judgements with a reversed presentation, the candidate pairs the
      two single orders rank the same way (None for a judge that never presents twice).
    - ``true_over_random``: the judgements with both a "true" and a "random" candidate, in
      which "true" ranks above "random" (a tie counts half; None when none has both).
    - ``reference_agreement``: pairs ordered as the judge named "reference" in ``other``
      orders them, pooled over queries (ties left out; None without that judge).

    Failed judgements are skipped everywhere.
    """
    ok = [j for j in judgements if not j.failed]
    agreement_with: dict[str, float] = {}
    reference_agreement: PairShare | None = None
    for name, theirs in (other or {}).items():
        by_query: dict[str, list[Judgement]] = defaultdict(list)
        for j in theirs:
            if not j.failed:
                by_query[j.query_id].append(j)
        seen: dict[str, int] = defaultdict(int)
        values: list[float | None] = []
        same_all = total_all = 0
        for j in ok:
            k = seen[j.query_id]
            seen[j.query_id] += 1
            matches = by_query.get(j.query_id, [])
            if k < len(matches):
                same, total = _agreement_counts(j, matches[k])
                values.append(same / total if total else None)
                same_all += same
                total_all += total
        mean = _mean(values)
        if mean is not None:
            agreement_with[name] = mean
        if name == REFERENCE_NAME and total_all:
            reference_agreement = pair_share(float(same_all), total_all)
    rev_pairs = sum(j.reversal_pairs for j in ok)
    true_ranks = [
        (
            j.ranks[TRUE_LABEL],
            all(r > j.ranks[TRUE_LABEL] for x, r in j.ranks.items() if x != TRUE_LABEL),
        )
        for j in ok
        if TRUE_LABEL in j.ranks
    ]
    return JudgeReliability(
        judge=judge_name,
        shuffle_agreement=_mean(j.agreement for j in ok),
        agreement_with=agreement_with,
        true_mean_rank=fmean(r for r, _ in true_ranks) if true_ranks else None,
        true_first_rate=fmean(1.0 if first else 0.0 for _, first in true_ranks)
        if true_ranks
        else None,
        reversal=pair_share(sum(j.reversal_same for j in ok), rev_pairs) if rev_pairs else None,
        true_over_random=_true_over_random(ok),
        reference_agreement=reference_agreement,
    )
