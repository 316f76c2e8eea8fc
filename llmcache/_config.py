"""Cache-wide defaults and per-category policies."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._equivalence import equivalence_name, equivalence_named
from ._errors import ConfigurationError
from ._types import CacheOptions, EmbedMode, Guard, Mode, VerifyPath, refuse_unknown_fields

__all__ = ["DEFAULT_BUDGET", "CacheConfig", "CategoryPolicy", "Limits", "ResolvedPolicy"]

#: The wrong-hit budget of a guard asked for without one (``guard="audit"`` alone).
DEFAULT_BUDGET = 0.05
#: The most leading words ``lead_words`` may ask to match: a subject is a few words; more would
#: be an exact key of the whole text, which ``threshold=0.999`` already is.
MAX_LEAD_WORDS = 16


class Limits(BaseModel):
    """How big a cache may grow, and how long an entry may live. ``None`` is unbounded.

    ``max_entries_per_table`` bounds each table (category × agent × parameters),
    ``max_entries`` and ``max_bytes`` the whole cache (bytes: the size of the entries' JSON as
    stored, not of the index files). When a bound is passed, the least recently hit entries go
    first (an entry never hit counts as hit when it was stored). ``ttl_seconds`` expires an entry
    that long after it was stored, measured on the cache's clock: wall time by default, or the
    caller's (a simulation's own time) given as ``SemanticCache(clock=...)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_entries_per_table: int | None = Field(default=None, ge=1)
    max_entries: int | None = Field(default=None, ge=1)
    max_bytes: int | None = Field(default=None, ge=1)
    ttl_seconds: float | None = Field(default=None, gt=0)

    @property
    def bounded(self) -> bool:
        """Whether any limit is set."""
        return any(getattr(self, name) is not None for name in type(self).model_fields)

    def describe(self) -> str:
        """One line for people: ``max_entries=1000, ttl_seconds=3600`` or ``unbounded``."""
        values = {n: getattr(self, n) for n in type(self).model_fields}
        shown = [f"{n}={int(v) if float(v).is_integer() else v}" for n, v in values.items() if v]
        return ", ".join(shown) or "unbounded"


class CategoryPolicy(BaseModel):
    """How one prompt category is cached. ``None`` fields fall back to :class:`CacheConfig`.

    ``threshold`` is a raw cosine (see :class:`~llmcache.types.Similarity`). ``bypass`` skips lookup
    and storage but still validates, retries and records the call (dialogue categories in the
    thesis bypass the cache this way). ``wrong_hit_budget``, ``equivalence``, ``pool_evidence``,
    ``twin_rate``, ``variety``, ``verifier``, ``verify_band``, ``verify_path``,
    ``detect_exact``, ``exact_times``, ``opposites_gate``, ``serve_identical``, ``lead_words``
    and ``guard``:
    see :class:`CacheConfig`. ``validator`` and ``fallback`` are the category's defaults for
    :class:`~llmcache.CacheOptions`' own (a call's win).

    ``keyword_slots``: for the category's calls that carry slot values and no keywords (a
    prompt file recognised, a template learned from the traffic), the slots whose values are
    embedded, in that order. Every other slot is then context, neither embedded nor matched,
    even a time, but for the slots a call names exact and, in a table the agents share (the
    calls name no agent), the names: a short value the call repeats, and the short slots its
    roles say tell the callers apart. It is a choice made on evidence that the other slots do
    not change the answer, as ``python -m llmcache tune`` makes it (from a recording, refusing
    any choice that served one agent another's answer).
    Without it the cache learns the slots' roles from the table's traffic (``_slots.py``).
    """

    # Unknown settings are refused (a misspelt or newer setting must not do nothing silently).
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    embed: EmbedMode | None = None
    mode: Mode | None = None
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    modifier: Any = None
    validator: Any = None
    fallback: str | None = None
    bypass: bool = False
    wrong_hit_budget: float | None = Field(default=None, gt=0.0, lt=1.0)
    guard: Guard | None = None
    equivalence: Any = None  # an Equivalence; Any because Protocols are not pydantic types
    pool_evidence: bool | None = None
    twin_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    variety: bool | None = None
    verifier: Any = None  # a Verifier
    verify_band: float | None = Field(default=None, gt=0.0, le=1.0)
    verify_path: VerifyPath | None = None
    detect_exact: bool | None = None
    opposites_gate: bool | None = None
    exact_times: bool | None = None
    serve_identical: bool | None = None
    lead_words: int | None = Field(default=None, ge=0, le=MAX_LEAD_WORDS)
    keyword_slots: tuple[str, ...] | None = Field(default=None, min_length=1)


class CacheConfig(BaseModel):
    """Defaults for every call, and the policies of named categories.

    ``max_attempts`` is how many times an invalid answer is resubmitted on the requested model
    (the thesis used 20); after that the request goes to ``superior_model`` for up to
    ``escalation_attempts`` tries, if one is set. ``k`` is how many neighbours a lookup fetches
    (more than one so that a corrupt or unusable best entry still leaves candidates).
    Unknown settings are refused with a pydantic ``ValidationError`` naming the valid ones.

    ``max_entries_per_table``, ``max_entries``, ``max_bytes`` and ``ttl_seconds`` bound the
    cache (see :class:`Limits`; all ``None`` by default: unbounded). A cache opened with any of
    them set records them in the store, so that other processes (and ``python -m llmcache
    prune``/``stats``) that open it without limits of their own keep to the same ones.

    ``wrong_hit_budget`` (δ, e.g. 0.05; ``None``: off) replaces the static ``threshold`` of a
    table in ``online`` mode by one learned from labels, kept so that the estimated *excess*
    of wrong hits over the model's own variability stays at or under δ: the rate at which a
    served answer is not acceptable, minus the rate at which the model's own second answer to
    the same query is not (docs/wrong-hit-budget.md; for a deterministic model, the plain
    wrong-hit rate). Labels and pairs compare answers by the category's ``equivalence`` (an
    :class:`~llmcache.verification.Equivalence`; default
    :func:`~llmcache.verification.same_answer`). Categories and calls may set their own of
    both. ``pool_evidence`` lets the tables of one category and request parameters (one
    template, any agent) share their labels and pairs, never their answers; ``twin_rate`` is
    the share of misses (explored would-be hits included) asked twice while the pairs that
    measure the model's own variability are too few (0: never).

    ``guard`` says how a budget is kept (``None``: ``prove`` when ``wrong_hit_budget`` is set,
    else ``off``). ``prove`` (fail-closed) serves a table only at a threshold its labels prove
    within δ (the proof descends from the table's ``threshold``: docs/wrong-hit-budget.md),
    exploring would-be hits until then; ``audit`` (fail-open) serves from the first
    candidate at the table's ``threshold`` and audits a share of would-be hits (asked like an
    exploration: the caller gets the fresh answer), tightening a table whose audits show its
    excess above δ, by bounds valid however often they are looked at; ``off`` serves by the
    threshold alone. A guard without a budget keeps :data:`DEFAULT_BUDGET`.

    ``variety`` serves a hit from one of the answers stored for the nearest entry's very prompt
    (twins, explorations, earlier misses of it), drawn at random, rather than always the one
    nearest, so that agents asking one thing again do not always hear one answer; ``None`` (the
    default) turns it on for requests that sample (no
    ``temperature=0``). ``explore_seed`` seeds the draws that pick which would-be hits are explored
    (``None``:
    unseeded), so a replayed stream explores the same calls again; it is read when the cache
    is opened, and views made by :meth:`~llmcache.SemanticCache.with_config` share its draws.

    ``verifier`` (a :class:`~llmcache.verification.Verifier`, e.g.
    :class:`~llmcache.verification.LLMVerifier`; ``None``:
    off) re-scores, in ``online`` mode, a *near miss*: a nearest entry whose cosine lies in
    ``[threshold - verify_band, threshold)``, the threshold being the one in force (static or
    learned). ``verify_path="request"`` asks before answering: a yes is served as a hit, a no
    is a miss. ``"background"`` answers the miss as usual and asks afterwards in a worker
    thread. Either way the verdict is a label of the table (a yes at cosine ``c`` a right one,
    a no a wrong one), so under a budget verdicts move the learned threshold. Categories and
    calls may set their own of all three.

    ``detect_exact`` makes a templated call's slot whose value, as a whole, is a time, a date
    or a numeric range (``09:00 AM``, ``2023-02-13``, ``February 13, 2023``, ``10:00 - 11:00``)
    an exact slot, as if the template named it in ``exact_slots``: a cached answer is served
    only to a call with the very same value, since embeddings cannot tell such values apart.
    ``False`` leaves them to the embedding (categories may set their own).

    ``exact_times`` does the same for the times and dates *inside* an embedded slot's value
    (``[Monday February 13 -- 10:00 AM] Activity: Isabella is``): a cached answer is served
    only when every such token of the call's slots matches the entry's, the rest of the value
    being embedded as usual (with ``detect_exact`` only: turning that off leaves every time
    to the embedding). On by default: an hourly schedule's hour decides its answer, and
    prompts that merely carry the clock lose few hits by it (``docs/performance.md``).

    ``opposites_gate`` refuses a candidate that passed the threshold when its text means the
    opposite of the query's: they differ by a negation, by WordNet antonyms or by a number
    (:func:`~llmcache.verification.opposition`; ``entering``/``leaving``, ``happy``/``not
    happy``, ``2``/``5 coffees``). The call is a miss, counted per table as refused by it, and
    its :class:`~llmcache.CallInfo` names the pair of words. It applies in every mode and is
    not sent to a ``verifier``: the texts themselves say the answer does not carry over.
    ``False`` turns it off (categories may set their own).

    ``serve_identical``: under a guard (``wrong_hit_budget``), an answer stored for the very
    same prompt of the same table is served without a threshold, exploration or audit: it is
    the model's own answer to that prompt, acceptable as often as asking again would be, so
    its expected excess is 0 by construction (docs/promise.md). ``False`` makes such repeats
    earn their place like any other candidate (categories may set their own).

    ``lead_words`` (0: off) is how many leading words of the embedded text must be the same
    (case and punctuation aside) for a stored entry to be served: the others are passed over
    as an exact slot's are, and a would-be hit refused by them is counted as refused by
    ``(leading words)``. A sentence embedding weighs an event's subject ("Rajiv Patel is
    conversing about ..." against "conversing about ...") as a word or two among many, while
    the answer may turn on it. ``python -m llmcache tune`` tries it per category
    (docs/frontier.md); answers to the very same prompt are never refused by it.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    mode: Mode = Mode.ONLINE
    embed: EmbedMode = EmbedMode.KEYWORD
    threshold: float = Field(default=0.9, ge=-1.0, le=1.0)
    k: int = Field(default=4, ge=1)
    max_attempts: int = Field(default=20, ge=1)
    superior_model: str | None = None
    escalation_attempts: int = Field(default=3, ge=0)
    categories: dict[str, CategoryPolicy] = Field(default_factory=dict)
    max_entries_per_table: int | None = Field(default=None, ge=1)
    max_entries: int | None = Field(default=None, ge=1)
    max_bytes: int | None = Field(default=None, ge=1)
    ttl_seconds: float | None = Field(default=None, gt=0)
    wrong_hit_budget: float | None = Field(default=None, gt=0.0, lt=1.0)
    guard: Guard | None = None
    explore_seed: int | None = None
    pool_evidence: bool = True
    twin_rate: float = Field(default=0.25, ge=0.0, le=1.0)
    variety: bool | None = None
    verifier: Any = None  # a Verifier; Any because Protocols are not pydantic types
    verify_band: float = Field(default=0.1, gt=0.0, le=1.0)
    verify_path: VerifyPath = "request"
    detect_exact: bool = True
    exact_times: bool = True
    opposites_gate: bool = True
    serve_identical: bool = True
    lead_words: int = Field(default=0, ge=0, le=MAX_LEAD_WORDS)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CacheConfig:
        """A configuration written by :meth:`to_file` or by hand, as JSON. A category's
        ``equivalence`` is given by name (``"exact"``, ``"within:1"``:
        :func:`~llmcache.verification.equivalence_named`). A top-level
        ``"tuning"`` object (what ``python -m llmcache tune`` chose each setting on) is for
        people and is not read. Settings that are code (``modifier``, ``validator``,
        ``verifier``) cannot come from a file and are refused, as is anything unreadable,
        each with a :class:`~llmcache.errors.ConfigurationError` naming the file."""
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the configuration {where}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigurationError(f"{where}: a configuration is an object of settings")
        data.pop("tuning", None)
        _refuse_code(data, f"{where}")
        categories = data.get("categories")
        if isinstance(categories, Mapping):
            named = {}
            for name, policy in categories.items():
                if isinstance(policy, Mapping):
                    _refuse_code(policy, f"{where}: category {name!r}")
                    policy = dict(policy)
                    if isinstance(policy.get("equivalence"), str):
                        policy["equivalence"] = equivalence_named(policy["equivalence"])
                named[name] = policy
            data["categories"] = named
        try:
            return cls(**data)
        except (ValidationError, TypeError) as exc:
            raise ConfigurationError(f"{where}: {exc}") from None

    def to_file(
        self, path: str | os.PathLike[str], *, tuning: Mapping[str, Any] | None = None
    ) -> Path:
        """Write this configuration as JSON that :meth:`from_file` reads back equal, with
        ``tuning`` (what each setting was chosen on) beside it under ``"tuning"``. Settings
        that are code (a modifier, validator or verifier; an equivalence without a name) have
        no file form: refused with a :class:`~llmcache.errors.ConfigurationError`."""
        _refuse_code(self.model_dump(exclude={"categories"}, exclude_defaults=True), "the cache")
        data: dict[str, Any] = self.model_dump(
            mode="json", exclude={"categories", "verifier"}, exclude_defaults=True
        )
        categories: dict[str, Any] = {}
        for name, policy in self.categories.items():
            _refuse_code(policy.model_dump(exclude={"equivalence"}), f"category {name!r}")
            entry = policy.model_dump(
                mode="json",
                exclude={"equivalence", "modifier", "validator", "verifier"},
                exclude_defaults=True,
            )
            if policy.equivalence is not None:
                named = equivalence_name(policy.equivalence)
                if named is None:
                    raise ConfigurationError(
                        f"category {name!r}: its equivalence has no name a file can hold "
                        "(name 'exact' or 'within:N', see llmcache.verification.equivalence_named)"
                    )
                entry["equivalence"] = named
            categories[name] = entry
        if categories:
            data["categories"] = categories
        if tuning is not None:
            data["tuning"] = dict(tuning)
        where = Path(path)
        where.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return where

    @property
    def limits(self) -> Limits:
        """The bounds this configuration sets (``Limits().bounded`` is false when none)."""
        return Limits(**{name: getattr(self, name) for name in Limits.model_fields})

    def updated(self, **changes: Any) -> CacheConfig:
        """A copy with some settings changed, validated like the constructor's arguments
        (``model_copy(update=...)`` would accept a misspelt or out-of-range setting)."""
        current = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self)(**{**current, **changes})

    def budget_for(self, category: str) -> float | None:
        """The wrong-hit budget of a category's tables, before any call's own (``None``: the
        category is guarded by its threshold alone)."""
        return self.guard_for(category)[1]

    def guard_for(self, category: str) -> tuple[Guard, float | None, float]:
        """How a category's tables keep their budget, before any call's own: the guard, the
        budget and the threshold the audit guard starts from."""
        policy = self.categories.get(category, CategoryPolicy())
        guard, budget = _guarded(
            policy.guard or self.guard, _first(policy.wrong_hit_budget, self.wrong_hit_budget)
        )
        return guard, budget, _first(policy.threshold, self.threshold)

    def resolve(self, options: CacheOptions) -> ResolvedPolicy:
        """Merge call options over the category policy over the cache defaults."""
        policy = self.categories.get(options.category, CategoryPolicy())
        mode = options.mode or policy.mode or self.mode
        guard, budget = _guarded(
            policy.guard or self.guard,
            _first(options.wrong_hit_budget, policy.wrong_hit_budget, self.wrong_hit_budget),
        )
        return ResolvedPolicy(
            mode=mode,
            embed=options.embed or policy.embed or self.embed,
            threshold=(
                options.threshold
                if options.threshold is not None
                else policy.threshold
                if policy.threshold is not None
                else self.threshold
            ),
            modifier=options.modifier if options.modifier is not None else policy.modifier,
            validator=options.validator if options.validator is not None else policy.validator,
            fallback=_first(options.fallback, policy.fallback),
            bypass=policy.bypass and options.mode is None,
            guard=guard,
            wrong_hit_budget=budget,
            equivalence=(
                options.equivalence if options.equivalence is not None else policy.equivalence
            ),
            pool_evidence=_first(policy.pool_evidence, self.pool_evidence),
            twin_rate=_first(policy.twin_rate, self.twin_rate),
            variety=_first(options.variety, policy.variety, self.variety),
            verifier=_first(options.verifier, policy.verifier, self.verifier),
            verify_band=_first(options.verify_band, policy.verify_band, self.verify_band),
            verify_path=_first(options.verify_path, policy.verify_path, self.verify_path),
            detect_exact=_first(policy.detect_exact, self.detect_exact),
            opposites_gate=_first(policy.opposites_gate, self.opposites_gate),
            exact_times=_first(policy.exact_times, self.exact_times),
            serve_identical=_first(policy.serve_identical, self.serve_identical),
            lead_words=_first(policy.lead_words, self.lead_words),
            keyword_slots=policy.keyword_slots,
        )


#: Settings that are code: a file cannot hold them.
_CODE_SETTINGS = ("modifier", "validator", "verifier")


def _refuse_code(settings: Mapping[str, Any], where: str) -> None:
    given = [name for name in _CODE_SETTINGS if settings.get(name) is not None]
    if given:
        raise ConfigurationError(
            f"{where}: {', '.join(given)} cannot be given in a configuration file (they are "
            "code): pass them to CacheConfig/CategoryPolicy in Python"
        )


def _guarded(guard: Guard | None, budget: float | None) -> tuple[Guard, float | None]:
    """The guard and budget in force: a budget without a guard is the proving guard (as it
    was before there were two); a guard without a budget keeps :data:`DEFAULT_BUDGET`;
    ``off`` keeps none."""
    if guard == "off":
        return "off", None
    if guard is None:
        return ("prove", budget) if budget is not None else ("off", None)
    return guard, budget if budget is not None else DEFAULT_BUDGET


def _first(*values: Any) -> Any:
    """The first value that is set: the call's, then the category's, then the cache's."""
    return next((value for value in values if value is not None), None)


class ResolvedPolicy(BaseModel):
    """The policy in force for one call."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    mode: Mode
    embed: EmbedMode
    threshold: float
    modifier: Any
    validator: Any
    bypass: bool
    # The answer text returned (never stored) when every attempt was invalid; None: raise.
    fallback: str | None = None
    guard: Guard = "off"
    wrong_hit_budget: float | None = None
    equivalence: Any = None
    pool_evidence: bool = True
    twin_rate: float = 0.25
    variety: bool | None = None
    verifier: Any = None
    verify_band: float = 0.1
    verify_path: VerifyPath = "request"
    detect_exact: bool = True
    opposites_gate: bool = True
    exact_times: bool = True
    serve_identical: bool = True
    lead_words: int = 0
    keyword_slots: tuple[str, ...] | None = None
