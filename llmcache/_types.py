"""Data that crosses llmcache's boundaries: call options, stored entries, call reports.

All of them are pydantic v2 models so that they validate on the way in and serialise to JSON
(never pickle) on the way out.
"""

from __future__ import annotations

import base64
import difflib
import functools
import hashlib
import json
import time
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Adapted",
    "CacheEntry",
    "CacheOptions",
    "CallInfo",
    "Candidate",
    "EmbedMode",
    "Guard",
    "Mode",
    "Partition",
    "Similarity",
    "Usage",
    "Verdict",
    "VerifyPath",
    "canonical_json",
    "checksum_problem",
    "entry_checksum",
    "refuse_unknown_fields",
]


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON: the one text every hash in llmcache is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def refuse_unknown_fields(model: type[BaseModel], data: Any) -> Any:
    """Refuse keys that are not fields of ``model``, naming the valid ones.

    Settings models also say ``extra="forbid"``; this runs first so that the message names the
    fields a caller may use (and the closest one to a misspelling) instead of pydantic's bare
    "extra inputs are not permitted": a misspelt ``treshold=0.95`` must not do nothing silently.
    """
    if not isinstance(data, Mapping):
        return data
    valid = list(model.model_fields)
    unknown = [str(key) for key in data if key not in model.model_fields]
    if not unknown:
        return data
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, valid, n=1)
        hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    raise ValueError(
        f"{model.__name__} has no setting {', '.join(hints)}; "
        f"valid settings are: {', '.join(valid)}"
    )


class Mode(str, Enum):
    """How the cache answers a call.

    - ``online``: a candidate at or above the category's threshold is a hit; otherwise the LLM
      is called, the answer validated and stored.
    - ``collect``: always call the LLM and store the answer (the data-gathering phase).
    - ``serve``: answer with the best candidate whenever the table is non-empty (the thesis's
      evaluation setting); an empty table falls back to a real call that is stored.
    - ``off``: pass straight through; nothing is looked up or stored.
    """

    ONLINE = "online"
    COLLECT = "collect"
    SERVE = "serve"
    OFF = "off"


class EmbedMode(str, Enum):
    """What text a prompt is embedded by.

    - ``keyword``: the template's slot values joined with single spaces (the thesis's
      keyword-only caching): ``"A B C"``.
    - ``full``: a canonical text of *all* messages, system and user alike.
    """

    KEYWORD = "keyword"
    FULL = "full"


#: Where a near miss is verified: ``request`` asks the verifier before answering (a yes is
#: served as a hit; under a wrong-hit budget only where the table's labels of earlier yeses
#: prove it, explored until then); ``background`` answers the miss as usual and verifies
#: afterwards, off the request path, the verdict becoming a label of the table where the call
#: gave none.
VerifyPath = Literal["request", "background"]
#: How a table keeps its wrong-hit budget: ``off`` (the threshold alone), ``prove`` (serve only
#: what labels prove within δ: fail-closed) or ``audit`` (serve from the first hit, audit a
#: share of hits, tighten what the audits show over δ: fail-open). docs/wrong-hit-budget.md.
Guard = Literal["off", "prove", "audit"]


class Similarity(BaseModel):
    """One similarity, on both scales in use.

    ``cosine`` is the raw cosine in [-1, 1]; ``normalized`` is the thesis's min-max mapping
    ``(cosine + 1) / 2`` in [0, 1]. **Thresholds in llmcache compare against ``cosine``.**
    """

    model_config = ConfigDict(frozen=True)

    cosine: float

    @property
    def normalized(self) -> float:
        return (self.cosine + 1.0) / 2.0

    @classmethod
    def from_normalized(cls, value: float) -> Similarity:
        return cls(cosine=2.0 * value - 1.0)


class Usage(BaseModel):
    """Token counts of one request, and where they came from.

    ``source`` is ``"api"`` when the server reported usage, otherwise the estimator used
    (``"o200k_base"`` for the offline BPE tokenizer, ``"chars/4"`` for the thesis's rule).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = "api"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        source = self.source if self.source == other.source else "mixed"
        if self.total_tokens == 0:
            source = other.source
        elif other.total_tokens == 0:
            source = self.source
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            source=source,
        )


class CacheOptions(BaseModel):
    """What a caller tells the cache about one call (the ``cache=`` keyword of ``create``).

    ``category`` names the prompt's template; ``agent`` who asks (tables are split by both).
    ``keywords`` are the values that fill the template's slots: required in keyword mode.
    ``options`` are the choices the prompt offers, used by the ``choose`` modifier.
    ``metadata`` is free caller data (e.g. simulated time) that the recorder writes out.
    ``constraints`` are request parameters of this query alone (a ``response_format`` whose
    schema lists this query's allowed answers, say): added to every request the call sends,
    kept out of the table key, so that queries of one template share a table; a keyword
    argument of ``create`` may not also be a constraint.
    ``store=False`` looks the call up and serves a hit as usual, but never stores the answer
    of a miss (an HTTP client's ``no-store``): such a miss neither leads nor waits for
    another thread's miss on the same question, since nobody could be served from it.
    ``wrong_hit_budget``, ``equivalence``, ``verifier``, ``verify_band``, ``verify_path`` and
    ``variety`` are this call's own (see :class:`~llmcache.CacheConfig`).
    ``template`` identifies the prompt's template by its text (``PromptTemplate.digest``): a
    templated call's tables are keyed by it, not by ``category`` (then only a display name), so
    two templates that share a name never share answers and renaming one keeps its tables.
    ``slots`` are the template's slot values by slot name; in keyword mode the cache embeds the
    slots that vary within the table (``keywords`` then override that choice).
    ``exact_slots`` name slots whose values must match exactly for a hit (times, dates).
    ``fallback`` is the answer text returned, counted and never stored, when every attempt was
    invalid, instead of raising :class:`~llmcache.errors.InvalidResponseError`.
    Fields left ``None`` take the category's policy, then the cache's defaults.
    Unknown fields and values of the wrong type are refused with a pydantic
    ``ValidationError`` (a ``ValueError``), as every other bad option is.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return refuse_unknown_fields(cls, data)

    category: str = Field(min_length=1)
    agent: str = ""
    keywords: tuple[str, ...] | None = None
    options: tuple[str, ...] | None = None
    template: str | None = Field(default=None, min_length=1)
    slots: dict[str, str] | None = None
    exact_slots: tuple[str, ...] | None = None
    fallback: str | None = None
    embed: EmbedMode | None = None
    mode: Mode | None = None
    store: bool = True
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    modifier: Any = None  # a Modifier; Any because Protocols are not pydantic types
    validator: Any = None  # a Validator, a pydantic model class, or None
    wrong_hit_budget: float | None = Field(default=None, gt=0.0, lt=1.0)
    equivalence: Any = None  # an Equivalence, or None
    verifier: Any = None  # a Verifier, or None
    verify_band: float | None = Field(default=None, gt=0.0, le=1.0)
    verify_path: VerifyPath | None = None
    variety: bool | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Request parameters of this query alone (e.g. a response_format whose JSON schema lists
    # this query's allowed places): sent with every request the call makes, recorded, and never
    # part of the table key, so queries of one template still share a table. A served answer
    # must meet them through the validator, as every served answer must.
    constraints: dict[str, Any] = Field(default_factory=dict)

    @field_validator("keywords", "options", "exact_slots", mode="before")
    @classmethod
    def _tuple(cls, value: Any) -> Any:
        if value is None or isinstance(value, tuple):
            return value
        if isinstance(value, str):
            # A lone string is almost always a bug (it would be split into characters).
            return (value,)
        if isinstance(value, (bytes, bytearray, Mapping)) or not hasattr(value, "__iter__"):
            # Not a sequence of texts (keywords=5, a dict, bytes): left as it is, so that
            # pydantic refuses it with a ValidationError instead of tuple() raising TypeError.
            return value
        return tuple(value)


class Partition(BaseModel):
    """One cache table: a category, an agent and the output-affecting request parameters.

    A templated call's table (``CacheOptions.template`` set) is keyed by the template's identity
    instead of its category: ``params_hash`` then starts with :data:`TEMPLATE_MARK` and hashes
    the template's digest together with the request parameters, and ``key`` leaves the
    category out, so that ``category`` is only the name the table is shown by. Kept in
    ``params_hash`` (not a field of its own) so that every backend, which stores a table as
    its four fields, reads the same key back.
    """

    model_config = ConfigDict(frozen=True)

    category: str
    agent: str
    params_hash: str
    model: str = ""

    @property
    def templated(self) -> bool:
        """Whether the table is keyed by a template's identity rather than its category."""
        return self.params_hash.startswith(TEMPLATE_MARK)

    @property
    def key(self) -> str:
        """A short stable identifier, safe in file names."""
        # A category is never empty, so a templated key never equals a category's.
        category = "" if self.templated else self.category
        return _partition_key(category, self.agent, self.params_hash)

    @property
    def pool_key(self) -> str:
        """The identifier of the table's *pool*: every table of one category (or one template)
        and one set of request parameters (any agent), whose wrong-hit evidence they share."""
        category = "" if self.templated else self.category
        return "pool:" + _partition_key(category, "", self.params_hash)


#: How the ``params_hash`` of a table keyed by its template begins (see :class:`Partition`).
TEMPLATE_MARK = "t:"


@functools.lru_cache(maxsize=4096)
def _partition_key(category: str, agent: str, params_hash: str) -> str:
    # Memoised: a hit asks for its table's key several times, and a town has a few hundred
    # tables. Not a cached attribute, which model_copy(update=...) would carry over stale.
    digest = hashlib.sha256(canonical_json([category, agent, params_hash]).encode()).hexdigest()
    return digest[:24]


# What an entry's checksum covers: everything a lookup decides a hit by (table, text, vector,
# slot values) and everything a hit hands back or adapts (answer, completion, keywords, options,
# messages). Not the id (assigned by the store), the timestamps, usage or free metadata. Named
# explicitly and versioned, so that adding a field to CacheEntry never invalidates stored
# checksums: an entry with slot values (a templated call) is sealed as "v2", over the "v1"
# fields and its slots; one without, as before, so older entries keep their checksums and older
# versions of llmcache read a "v2" entry as unverifiable rather than damaged.
_CHECKSUM_VERSION = "v1"
_CHECKSUM_FIELDS = (
    "partition",
    "embed_text",
    "embed_mode",
    "embedder_id",
    "vector_b64",
    "keywords",
    "options",
    "messages",
    "content",
    "completion",
)
_SLOT_CHECKSUM_VERSION = "v2"
_SLOT_CHECKSUM_FIELDS = ("slots", "embedded_slots")
_VERSIONS = {
    _CHECKSUM_VERSION: _CHECKSUM_FIELDS,
    _SLOT_CHECKSUM_VERSION: _CHECKSUM_FIELDS + _SLOT_CHECKSUM_FIELDS,
}


def _checksum_version(data: Mapping[str, Any]) -> str:
    has_slots = any(data.get(name) is not None for name in _SLOT_CHECKSUM_FIELDS)
    return _SLOT_CHECKSUM_VERSION if has_slots else _CHECKSUM_VERSION


def entry_checksum(data: Mapping[str, Any], version: str | None = None) -> str:
    """The checksum of an entry, from its JSON form (the dict that its stored JSON parses to).

    Taken over the JSON form rather than the Python objects, so that what is verified is
    exactly what was written: a float or tuple that changes shape through JSON cannot make a
    sound entry look damaged.
    """
    version = version or _checksum_version(data)
    payload = canonical_json([data.get(name) for name in _VERSIONS[version]])
    digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{version}:{digest}"


def checksum_problem(data: Mapping[str, Any]) -> str | None:
    """Why the JSON form of a stored entry fails its checksum, or ``None`` when it passes.

    Entries written before checksums existed carry none: they load as unverifiable but valid
    (not migrated: rewriting every entry on open would be slow, and a directory may be shared
    with processes of the older version that still write entries without one).
    """
    stored = data.get("checksum")
    if stored is None:
        return None
    if not isinstance(stored, str):
        return "its checksum is not a text"
    version = stored.partition(":")[0]
    if version not in _VERSIONS:
        # A later version's kind of checksum: unverifiable here, like none. Treating it as
        # damage would make this version evict every entry a newer one shares the cache with.
        return None
    if version == _CHECKSUM_VERSION and _checksum_version(data) != version:
        # Slot values added to an entry sealed without any: damage, not an older entry.
        return "its content does not match its checksum"
    if entry_checksum(data, version) != stored:
        return "its content does not match its checksum"
    return None


class CacheEntry(BaseModel):
    """One stored answer: what was asked, what was answered, and the vector it is found by.

    ``checksum`` (see :meth:`sealed`) lets a store tell an answer damaged on disk from a sound
    one; a store sets it on ``put``, and an entry that fails it is treated as corrupt.
    """

    id: int = -1  # assigned by the store
    partition: Partition
    embed_text: str
    embed_mode: EmbedMode
    embedder_id: str
    vector_b64: str  # float32 little-endian, base64: compact and exact, unlike a JSON float list
    keywords: tuple[str, ...] | None = None
    options: tuple[str, ...] | None = None
    # A templated call's slot values, and the slots its vector embeds (in that order): what
    # an exact slot is compared by, and what the entry is re-scored by when its table has
    # since chosen other slots (``None``: not a templated call, or keywords given).
    slots: dict[str, str] | None = None
    embedded_slots: tuple[str, ...] | None = None
    messages: list[dict[str, Any]]
    content: str
    completion: dict[str, Any]  # the ChatCompletion as JSON, to rebuild on a hit
    usage: Usage
    created_at: float = Field(default_factory=time.time)
    metadata: dict[str, Any] = Field(default_factory=dict)
    checksum: str | None = None

    @staticmethod
    def checksum_problem(data: Mapping[str, Any]) -> str | None:
        """Why the JSON form of a stored entry fails its checksum (``None``: it passes, or it
        has no checksum); see :func:`checksum_problem`."""
        return checksum_problem(data)

    def sealed(self) -> CacheEntry:
        """A copy carrying the checksum of its current content.

        Raises pydantic's ``PydanticSerializationError`` when what it covers cannot be written
        as JSON (a lone surrogate in a message, say): such an entry is not stored.
        """
        fields = set(_CHECKSUM_FIELDS + _SLOT_CHECKSUM_FIELDS)
        data = json.loads(self.model_dump_json(include=fields))
        return self.model_copy(update={"checksum": entry_checksum(data)})

    @staticmethod
    def encode_vector(vector: NDArray[np.float32]) -> str:
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")

    def vector(self) -> NDArray[np.float32]:
        return np.frombuffer(base64.b64decode(self.vector_b64), dtype="<f4").astype(np.float32)


class Candidate(BaseModel):
    """An entry found by a lookup, with its similarity to the query."""

    model_config = ConfigDict(frozen=True)

    entry: CacheEntry
    similarity: Similarity


class Adapted(BaseModel):
    """What one cached candidate becomes for one query: the answer of
    :meth:`~llmcache.modifiers.HitStep.adapt`, the step a hit is made by.

    ``content`` is the modifier's answer, valid or not (``None`` when the modifier gave none,
    and for a stored answer made of tool calls, which is served as it was stored). ``valid``
    says whether the candidate answers the query (the answer passed the query's validator),
    ``error`` why not. ``usage`` and ``cost_usd`` are what the modifier spent asking the LLM
    (``revise``, every attempt): spent whether or not the answer is valid.
    """

    model_config = ConfigDict(frozen=True)

    modifier: str
    content: str | None
    valid: bool
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0


class Verdict(BaseModel):
    """A :class:`~llmcache.verification.Verifier`'s answer: does a cached entry answer the new
    query?

    ``same`` is the verdict. ``usage`` is what asking cost in tokens and ``model`` the model
    that spent them: the cache prices them with its own :class:`~llmcache.types.PriceTable` (so a
    price is written in one place), and a verifier that runs locally leaves both empty.
    """

    model_config = ConfigDict(frozen=True)

    same: bool
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None


Outcome = Literal["hit", "miss", "collect", "bypass"]


class CallInfo(BaseModel):
    """How one answer was made, reported beside the (unmodified) ChatCompletion.

    The one record of a call: the ledger counts it and the recorder writes its dataset line
    from it.

    ``outcome``: ``hit`` (answered from the cache), ``miss`` (looked up, then called the LLM),
    ``collect`` (called and stored without a lookup), ``bypass`` (not cached at all).
    ``category``, ``agent``, ``model`` and ``partition_key`` name the call's table, and
    ``pool_key`` the counters of its pool when it pools its wrong-hit evidence.
    ``usage``/``cost_usd`` are what this call really spent (LLM attempts, revisions, query
    embedding); ``avoided_usd`` and ``tokens_avoided`` are what a hit saved against calling the
    LLM. Of what was spent, ``revise_tokens``/``revise_usd`` went to a modifier's revision and
    ``embed_tokens``/``embed_usd`` to embedding the query (only a paid embedder costs money).
    ``embedded_slots`` are the slots a templated call's embedding text was made of, deciding
    first (``None``: the call gave its keywords, or is not templated or not in keyword mode).
    ``exact_refused`` names the exact slot (or ``"(leading words)"``, ``lead_words``) that
    kept the nearest entry from being served although it was close enough (the lookup may
    still have served another entry).
    ``corrupt_dropped`` counts damaged entries the lookup met (each evicted); ``store_failed``
    and ``record_failed`` say the answer was returned but could not be stored or recorded.

    Under a wrong-hit budget (``wrong_hit_budget``, the δ in force), ``threshold`` is the
    learned one; ``explored`` says a would-be hit was also sent to the LLM to label it (the
    paid answer is served, so ``outcome`` is ``miss``), and ``explore_tokens``/``explore_usd``
    what that cost (inside ``usage``/``cost_usd``). ``guard`` is how the table keeps its
    budget (``off``, ``prove``, ``audit``); under ``audit`` a would-be hit may be ``audited``
    instead: asked like an explored one, and what that cost is ``audit_tokens``/``audit_usd``
    (inside ``usage``/``cost_usd``), apart from exploration. ``label`` is the label this call
    gave its table: ``True`` when the nearest entry's answer agreed with the LLM's, ``False``
    when it did not or failed the query's validator, ``None`` when the call gave none. ``twin`` says
    the miss was asked a second time, for a pair of fresh answers (``twin_tokens``/``twin_usd``
    what that cost, inside ``usage``/``cost_usd``), and ``pair`` what the pair showed
    (``True``: the two fresh answers agreed), also for a label whose cached entry answered the
    very same prompt. ``choices`` is how many stored answers to the nearest entry's prompt a hit
    was drawn from (1: the nearest, as without variety). ``identical`` says a guarded table
    served an answer stored for this very prompt (the same messages): the model's own answer
    to it, served without a threshold, exploration or audit (docs/promise.md).

    With a verifier (docs/wrong-hit-budget.md), ``verified`` is its verdict on this call's
    near miss (``True``: served as a hit, unless the cached answer then failed the query's
    validator or, under a budget, the table's labels of earlier yeses do not yet prove this
    one -- then ``explored`` or a miss; ``False``: refused, the call a miss; ``None``: not
    asked, or asked off the request path), ``verify_failed`` says the verifier raised (the
    call went on as a miss) and ``verify_queued`` that the near miss waits for a verification
    off the request path. ``verify_tokens``/``verify_usd`` are what asking cost on the request
    path (inside ``usage``/``cost_usd``).

    ``fallback`` says every attempt was invalid and the answer returned is the options' (or the
    category's) ``fallback`` text, never stored; ``attempts``, ``usage`` and ``cost_usd`` still
    count every refused attempt.

    ``refused_by`` names what refused a candidate that passed the threshold (the call then a
    miss): ``"opposites"``, the opposites gate (its text means the opposite of the query's,
    see :func:`~llmcache.verification.opposition`), with ``refused_pair`` the words that
    differ, query's first (``leaving/entering``, ``not/-``: a negation only the query has).
    """

    outcome: Outcome
    category: str | None = None
    agent: str | None = None
    model: str | None = None
    partition_key: str | None = None
    pool_key: str | None = None
    similarity: Similarity | None = None
    threshold: float | None = None
    modifier: str | None = None
    entry_id: int | None = None
    attempts: int = 0
    escalated: bool = False
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    avoided_usd: float = 0.0
    tokens_avoided: int = 0
    revise_tokens: int = 0
    revise_usd: float = 0.0
    embed_tokens: int = 0
    embed_usd: float = 0.0
    embed_text: str | None = None
    embedded_slots: tuple[str, ...] | None = None
    exact_refused: str | None = None
    corrupt_dropped: int = 0
    store_failed: bool = False
    record_failed: bool = False
    wrong_hit_budget: float | None = None
    explored: bool = False
    explore_tokens: int = 0
    explore_usd: float = 0.0
    guard: Guard = "off"
    audited: bool = False
    audit_tokens: int = 0
    audit_usd: float = 0.0
    label: bool | None = None
    twin: bool = False
    twin_tokens: int = 0
    twin_usd: float = 0.0
    pair: bool | None = None
    choices: int = 1
    identical: bool = False
    verified: bool | None = None
    verify_failed: bool = False
    verify_queued: bool = False
    verify_tokens: int = 0
    verify_usd: float = 0.0
    fallback: bool = False
    refused_by: Literal["opposites"] | None = None
    refused_pair: str | None = None
    latency_s: float = 0.0
