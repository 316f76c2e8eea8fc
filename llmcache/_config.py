"""Cache-wide defaults and per-category policies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._types import CacheOptions, EmbedMode, Mode, VerifyPath, refuse_unknown_fields

__all__ = ["CacheConfig", "CategoryPolicy", "Limits", "ResolvedPolicy"]


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
    ``detect_exact`` and ``exact_times``: see :class:`CacheConfig`. ``validator`` and
    ``fallback`` are the category's defaults for :class:`~llmcache.CacheOptions`' own (a
    call's win).
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
    equivalence: Any = None  # an Equivalence; Any because Protocols are not pydantic types
    pool_evidence: bool | None = None
    twin_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    variety: bool | None = None
    verifier: Any = None  # a Verifier
    verify_band: float | None = Field(default=None, gt=0.0, le=1.0)
    verify_path: VerifyPath | None = None
    detect_exact: bool | None = None
    exact_times: bool | None = None


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
    explore_seed: int | None = None
    pool_evidence: bool = True
    twin_rate: float = Field(default=0.25, ge=0.0, le=1.0)
    variety: bool | None = None
    verifier: Any = None  # a Verifier; Any because Protocols are not pydantic types
    verify_band: float = Field(default=0.1, gt=0.0, le=1.0)
    verify_path: VerifyPath = "request"
    detect_exact: bool = True
    exact_times: bool = True

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
        """The wrong-hit budget of a category's tables, before any call's own."""
        policy = self.categories.get(category, CategoryPolicy())
        if policy.wrong_hit_budget is not None:
            return policy.wrong_hit_budget
        return self.wrong_hit_budget

    def resolve(self, options: CacheOptions) -> ResolvedPolicy:
        """Merge call options over the category policy over the cache defaults."""
        policy = self.categories.get(options.category, CategoryPolicy())
        mode = options.mode or policy.mode or self.mode
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
            wrong_hit_budget=(
                options.wrong_hit_budget
                if options.wrong_hit_budget is not None
                else self.budget_for(options.category)
            ),
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
            exact_times=_first(policy.exact_times, self.exact_times),
        )


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
    wrong_hit_budget: float | None = None
    equivalence: Any = None
    pool_evidence: bool = True
    twin_rate: float = 0.25
    variety: bool | None = None
    verifier: Any = None
    verify_band: float = 0.1
    verify_path: VerifyPath = "request"
    detect_exact: bool = True
    exact_times: bool = True
