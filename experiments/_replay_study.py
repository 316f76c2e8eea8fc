"""The replay study: the quality figures as replays of a recording, no LLM in the loop.

A recording is the town's prompts answered by one model (``run1.jsonl.gz`` … ``run3.jsonl.gz``
of :class:`~llmcache.replay.ReplayCall` lines, each with the model's second answer to the same
prompt in ``other_answers`` where it was asked twice, and a ``provenance.json`` naming the
model). Its three runs are replayed in order through the real cache
(:func:`llmcache.replay.replay`, the recording answering as the model): settings are chosen on
runs 1-2 and reported on run 3 (:func:`llmcache.replay.tune`, its check part being run 3),
per embedding mode, beside

- **static**: the library's static default threshold;
- **lead** (keyword mode): the static default with the first :data:`LEAD_WORDS` words of the
  embedded text exact (``CacheConfig.lead_words``), so the subject the keywords lead with is
  read beside the categories it decides;
- **serve**: serve mode, every query whose table has an entry answered from it, the tables
  holding every answer of runs 1-2 (the study's operating point);
- **random**: a random answer of the same table instead of the nearest (the baseline).

Every served answer is graded against the call's true answer by its category's own
acceptability (:meth:`agent_core.Template.acceptable`); the excess is over the model's own
second answers (:class:`llmcache.replay.Figures`). Options a query names by number are read as
the option they name before anything is compared, so that an answer means the same for every
query (the query's requirements are found in the town's runs the recording was made from).

Beside the town, the same table on the shared agent's day (``park_demo_isabella``: the ratings
gpt-3.5-turbo really gave, "within 1"), split by time, and on the gpt-4o-mini development bed
(``park_4omini_dev``: eight agents of one run, "within 1"), split by agents -- settings learned
on four agents and reported on the other four, with one more row, **exact**: only repeats of a
prompt already asked served (threshold :data:`EXACT_THRESHOLD`). Those beds are where the model
is known to tell good from random; the town stays the bed for locations and reactions.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from agent_core import TextAgreement, TownCall, template
from agent_core.llm import cache_config
from agent_core.tolerance import DEFAULT_TEXT_BOUND
from llmcache import CacheConfig, CacheOptions, CategoryPolicy, EmbedMode
from llmcache.embedders import Embedder, StoredEmbedder, embedding_text
from llmcache.replay import (
    CallResult,
    Figures,
    ReplayCall,
    Setting,
    check_mask,
    embedding_texts,
    figures,
    read_calls,
    replay,
    tune,
)
from llmcache.types import PriceTable, Usage
from llmcache.verification import Within

from ._collect import dataset_paths
from ._data import Prompt, cosine_of, load_run, messages_key
from ._results import AnswerSample, GuardStory, ReplayBed, ReplayRow, ReplayStudyResult

__all__ = [
    "DEFAULT_RECORDING",
    "DEFAULT_STUDY_THRESHOLDS",
    "DEV_BED",
    "EXACT_THRESHOLD",
    "LEAD_WORDS",
    "PARK",
    "RECORDED_CATEGORIES",
    "RECORDING_EMBEDDINGS",
    "STATIC_THRESHOLD",
    "TOWN_RUNS",
    "committed_recording",
    "read_recording_dir",
    "replay_study",
    "town_calls",
    "write_recording",
]

_ROOT = Path(__file__).resolve().parents[1]
#: Where the committed recording is (``run<n>.jsonl.gz`` and ``provenance.json``).
DEFAULT_RECORDING = _ROOT / "docs" / "results" / "recording"
#: A recording's own subdirectory of embedded texts (a :class:`StoredEmbedder` store), if any.
RECORDING_EMBEDDINGS = "embeddings"
#: The town's committed standard runs: what the recording's prompts were taken from.
TOWN_RUNS = _ROOT / "docs" / "results" / "standard" / "data"
#: The categories a recording of the town holds at least.
RECORDED_CATEGORIES = ("importance score", "finding location", "actor reaction", "agent reaction")
#: The shared agent's day (``../shared/benchmarks/park_demo_isabella`` beside the repository).
PARK = _ROOT.parent / "shared" / "benchmarks" / "park_demo_isabella"
#: The gpt-4o-mini development bed (``../shared/benchmarks/park_4omini_dev``: one folder per
#: agent), read by ``benchmarks/park_calls.py``'s ``bed_calls``.
DEV_BED = _ROOT.parent / "shared" / "benchmarks" / "park_4omini_dev"
#: The "exact repeats only" row's threshold (raw cosine): a prompt's very text asked again.
EXACT_THRESHOLD = 0.999
#: The "lead" row's leading words, held exact at the static default threshold in keyword mode
#: (``CacheConfig.lead_words``): an event's subject, which a sentence embedding weighs as a
#: word or two of many while the answer turns on it, is most often a name or an article and a
#: noun ("Rajiv Patel", "the cafe").
LEAD_WORDS = 2
#: The thresholds tuning tries, each one replay of the whole recording per mode (the
#: library's default grid has 20: a replay of a few thousand calls takes a minute on 2 shared
#: cores, and the study is to stay within minutes).
DEFAULT_STUDY_THRESHOLDS: tuple[float, ...] = (0.80, 0.85, 0.90, 0.93, 0.96, 0.98)
_SAMPLES = 3
#: The library's static default threshold (raw cosine) as the town configures it: the
#: comparison every tuned setting is read against.
STATIC_THRESHOLD = cache_config().threshold


def committed_recording() -> Path | None:
    """:data:`DEFAULT_RECORDING` when a recording is committed there, else ``None``."""
    return DEFAULT_RECORDING if any(DEFAULT_RECORDING.glob("run*.jsonl*")) else None


def _shown(path: Path) -> str:
    """A path as the report shows it: relative to the repository where it is inside it (never
    a machine's own path)."""
    try:
        return str(path.resolve().relative_to(_ROOT)) + "/"
    except ValueError:
        return path.name + "/"


def _town_paths(directory: Path) -> dict[int, Path]:
    out = {}
    for n in range(1, 100):
        path = dataset_paths(directory, n)[0]
        if not path.exists():
            break
        out[n] = path
    return out


def _town_call(prompt: Prompt | None) -> TownCall | None:
    if prompt is None:
        return None
    try:
        return prompt.call()
    except (KeyError, ValueError):  # metadata of another version of the town: compared raw
        return None


@cache
def _park_module() -> ModuleType:
    """``benchmarks/park_calls.py``, where the benchmarks build Park's calls (one place for
    Park's prompts and for the beds' agents)."""
    spec = importlib.util.spec_from_file_location(
        "_park_calls", _ROOT / "benchmarks" / "park_calls.py"
    )
    if spec is None or spec.loader is None:
        raise FileNotFoundError("benchmarks/park_calls.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _park_calls(folder: Path) -> list[ReplayCall]:
    """The shared agent's rated memories as calls."""
    calls: list[ReplayCall] = _park_module().park_calls(folder)
    return calls


def _dev_bed_calls(folder: Path) -> tuple[list[ReplayCall], list[bool], tuple[str, ...]]:
    """The development bed's calls: its tune agents' (interleaved by time, as the run made
    them), then its check agents', each call's time its place in that stream; which calls are
    the check agents'; and the check agents. The check part is then exactly the check agents'
    calls, by agents (the agents that appear last) and by time alike."""
    module = _park_module()
    tune_part: list[ReplayCall] = module.bed_calls(module.BED_TUNE_AGENTS, folder)
    check_part: list[ReplayCall] = module.bed_calls(module.BED_CHECK_AGENTS, folder)
    stream = [*tune_part, *check_part]
    calls = [c.model_copy(update={"time": float(i)}) for i, c in enumerate(stream)]
    mask = [False] * len(tune_part) + [True] * len(check_part)
    return calls, mask, tuple(module.BED_CHECK_AGENTS)


_within_one = Within(1)


# -- the recording ----------------------------------------------------------------------------


def town_calls(
    prompts: Iterable[Prompt], categories: Sequence[str] | None = RECORDED_CATEGORIES
) -> list[ReplayCall]:
    """A town run's kept prompts as replayable calls (one answer each: the run's own), in the
    order asked; ``categories``: only these (``None``: all)."""
    return [
        ReplayCall(
            category=p.category,
            agent=p.agent,
            messages=p.messages,
            keywords=p.keywords,
            answer=p.response,
            time=float(p.elapsed_minutes * 60),
            params={"model": p.model},
            prompt_tokens=p.prompt_tokens,
            completion_tokens=p.completion_tokens,
        )
        for p in prompts
        if categories is None or p.category in categories
    ]


def write_recording(
    runs: Mapping[int, Sequence[ReplayCall]], directory: Path, provenance: Mapping[str, Any]
) -> Path:
    """Write a recording: ``run<n>.jsonl.gz`` per run and ``provenance.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    for n, calls in runs.items():
        with gzip.open(directory / f"run{n}.jsonl.gz", "wt", encoding="utf-8") as out:
            for call in calls:
                out.write(call.model_dump_json(exclude_defaults=True) + "\n")
    (directory / "provenance.json").write_text(json.dumps(dict(provenance), indent=1) + "\n")
    return directory


def _model_of(runs: Mapping[int, Sequence[ReplayCall]], provenance: Mapping[str, Any]) -> str:
    named = provenance.get("model")
    if isinstance(named, str) and named:
        return named
    counts = Counter(c.model for calls in runs.values() for c in calls)
    return counts.most_common(1)[0][0] if counts else "unknown"


_RUN_FILE = re.compile(r"run(\d+)\.jsonl(?:\.gz)?")


def read_recording_dir(directory: Path) -> tuple[dict[int, list[ReplayCall]], dict[str, Any]]:
    """The runs of a recording (``run1.jsonl[.gz]`` …, read strictly: a malformed line is an
    error naming it) and its provenance (``{}`` without a ``provenance.json``)."""
    runs: dict[int, list[ReplayCall]] = {}
    # Every run<n> file, whatever numbers are present: a recording may hold some of the town's
    # runs only (its last one is the held-out run).
    for path in sorted(directory.glob("run*.jsonl*")):
        number = _RUN_FILE.fullmatch(path.name)
        if number is not None and int(number.group(1)) not in runs:
            runs[int(number.group(1))] = read_calls(path).calls
    if len(runs) < 2:
        raise FileNotFoundError(
            f"{directory} holds no recording: run1.jsonl.gz, run2.jsonl.gz, … are needed"
        )
    where = directory / "provenance.json"
    provenance = json.loads(where.read_text(encoding="utf-8")) if where.exists() else {}
    return runs, provenance if isinstance(provenance, dict) else {}


def _dev_recording(town_runs: Mapping[int, Sequence[Prompt]]) -> dict[int, list[ReplayCall]]:
    return {n: town_calls(prompts) for n, prompts in town_runs.items()}


# -- grading ----------------------------------------------------------------------------------


def _equivalence(category: str, text: TextAgreement) -> Callable[[str, str], bool]:
    t = template(category)

    def same(served: str, truth: str) -> bool:
        try:
            return t.acceptable(served, truth, text=text).acceptable
        except ValueError:  # an answer that does not parse is not the same answer
            return False

    return same


def _canonical(call: ReplayCall, town: TownCall | None) -> ReplayCall:
    """``call`` with its answers as the validated responses they are for this query (an option
    named by its number becomes the option's text), so that a served answer means the same
    for the query it is served to. An answer that does not validate is kept as it is."""
    if town is None:
        return call

    def one(text: str) -> str:
        try:
            return str(town.template.parse(text, town.requirements).model_dump_json())
        except ValueError:
            return text

    return call.model_copy(
        update={"answer": one(call.answer), "other_answers": [one(a) for a in call.other_answers]}
    )


# -- the configurations -----------------------------------------------------------------------


def _figures_of(
    results: Sequence[CallResult],
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    equivalences: Mapping[str, Callable[[str, str], bool]],
) -> tuple[Figures, dict[str, Figures]]:
    """Overall and per-category figures of the checked calls (``mask``)."""
    idx = [i for i in range(len(calls)) if mask[i]]
    by_category: dict[str, list[int]] = defaultdict(list)
    for i in idx:
        by_category[calls[i].category].append(i)
    overall = figures([results[i] for i in idx], [calls[i] for i in idx], equivalences)
    per = {
        c: figures([results[i] for i in ids], [calls[i] for i in ids], equivalences)
        for c, ids in sorted(by_category.items())
    }
    return overall, per


def _text(call: ReplayCall, mode: EmbedMode) -> str:
    """The text the cache looks ``call`` up by in ``mode`` (a call without keywords: its
    whole prompt, as :func:`llmcache.replay.replay` does)."""
    keywords = [k for k in call.keywords or [] if k.strip()]
    if mode is EmbedMode.KEYWORD and keywords:
        options = CacheOptions(category=call.category, agent=call.agent, keywords=tuple(keywords))
        return embedding_text(EmbedMode.KEYWORD, options, call.messages)
    options = CacheOptions(category=call.category, agent=call.agent, embed=EmbedMode.FULL)
    return embedding_text(EmbedMode.FULL, options, call.messages)


def _table_answers(
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    embedder: Embedder,
    mode: EmbedMode | None,
    equivalences: Mapping[str, Callable[[str, str], bool]],
    prices: PriceTable,
    seed: int,
) -> list[CallResult]:
    """Serve mode (``mode``: the nearest entry of the query's table by that embedding) or a
    random same-table answer (``mode`` ``None``). The tables hold every answer of the tune
    part (``mask`` false), as a table run fills them, and of the checked calls those a
    serve-mode cache stores: the misses, whose table was empty, paid at their recorded
    tokens."""
    rng = random.Random(f"{seed}:random-answer")
    tables: dict[tuple[str, str], list[int]] = defaultdict(list)
    vectors: NDArray[np.float32] | None = None
    if mode is not None:
        vectors = np.asarray(embedder.embed([_text(c, mode) for c in calls]), dtype=np.float32)
    out: list[CallResult] = []
    for i, call in enumerate(calls):
        table = tables[(call.category, call.agent)]
        cost = prices.cost(
            call.model,
            Usage(prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens),
        )
        served: str | None = None
        cosine: float | None = None
        if table:
            if vectors is None:
                j = rng.choice(table)
            else:
                sims = vectors[table] @ vectors[i]
                k = int(np.argmax(sims))
                j, cosine = table[k], float(sims[k])
            served = calls[j].answer
        if served is None or not mask[i]:
            table.append(i)  # what a serve-mode cache stores: what it did not serve
        out.append(
            CallResult(
                index=i,
                category=call.category,
                agent=call.agent,
                outcome="miss" if served is None else "hit",
                cosine=cosine,
                query="",
                served=served,
                truth=call.answer,
                acceptable=(
                    None if served is None else equivalences[call.category](served, call.answer)
                ),
                cost_usd=cost if served is None else 0.0,
                baseline_usd=cost,
            )
        )
    return out


Split = Literal["time", "agents"]


@dataclass(frozen=True)
class _Replays:
    """How every bed is replayed: one embedder (each text embedded once for all replays), the
    embedding modes, the study's δ, the thresholds tuning tries, and the seeds."""

    embedder: StoredEmbedder
    modes: Sequence[EmbedMode]
    delta: float
    thresholds: Sequence[float]
    seed: int
    guard_seeds: int = 1


def _check_fraction(calls: Sequence[ReplayCall], mask: Sequence[bool], split: Split) -> float:
    """The ``check_fraction`` for which tune's ``split`` cuts exactly at ``mask`` (by agents,
    just under the checked share: a check part grows by whole agents until it reaches it)."""
    checked = sum(mask)
    fraction = checked / len(calls) if split == "time" else (checked - 0.5) / len(calls)
    if check_mask(calls, split, fraction) != list(mask):
        raise ValueError(f"a {split} split cannot hold out exactly the calls asked for")
    return fraction


_FixedConfig = Literal["static", "lead", "exact"]


def _fixed_settings(mode: EmbedMode, *, exact: bool) -> list[tuple[_FixedConfig, Setting]]:
    """The fixed rows replayed beside the tuned one in ``mode``: the static default, in
    keyword mode the static default with the first :data:`LEAD_WORDS` words exact (the
    keywords lead with the event's subject; a whole prompt leads with the template's own
    words), and with ``exact`` the exact-repeats row."""
    fixed: list[tuple[_FixedConfig, Setting]] = [
        ("static", Setting(embed=mode, threshold=STATIC_THRESHOLD))
    ]
    if mode is EmbedMode.KEYWORD:
        fixed.append(
            ("lead", Setting(embed=mode, threshold=STATIC_THRESHOLD, lead_words=LEAD_WORDS))
        )
    if exact:
        fixed.append(("exact", Setting(embed=mode, threshold=EXACT_THRESHOLD)))
    return fixed


def _bed(
    bed: str,
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    equivalences: Mapping[str, Callable[[str, str], bool]],
    how: _Replays,
    *,
    split: Split = "time",
    exact: bool = False,
) -> list[ReplayRow]:
    """Every configuration's figures on the checked calls of ``calls`` (``exact``: with the
    exact-repeats row)."""
    prices = PriceTable()
    base = CacheConfig(
        categories={c: CategoryPolicy(equivalence=e) for c, e in equivalences.items()}
    )
    texts = embedding_texts(calls, how.modes)
    for i in range(0, len(texts), 256):  # in batches, each text once for every replay
        how.embedder.embed(texts[i : i + 256])
    fraction = _check_fraction(calls, mask, split)
    rows: list[ReplayRow] = []
    for mode in how.modes:
        tuned = tune(
            calls,
            delta=how.delta,
            split=split,
            check_fraction=fraction,
            thresholds=how.thresholds,
            embeds=(mode,),
            base=base,
            embedder=how.embedder,
            seed=how.seed,
            prices=prices,
        )
        rows.append(
            ReplayRow(
                bed=bed,
                mode=mode.value,
                config="tuned",
                overall=tuned.check.overall,
                categories=dict(sorted(tuned.check.categories.items())),
                settings={
                    c: ch.setting.describe() if ch.setting is not None else f"uncached ({ch.why})"
                    for c, ch in sorted(tuned.choices.items())
                },
            )
        )
        for config, setting in _fixed_settings(mode, exact=exact):
            report = replay(
                calls,
                base.updated(
                    embed=mode, threshold=setting.threshold, lead_words=setting.lead_words
                ),
                embedder=how.embedder,
                seed=how.seed,
                prices=prices,
            )
            overall, per = _figures_of(report.results, calls, mask, equivalences)
            rows.append(
                ReplayRow(
                    bed=bed,
                    mode=mode.value,
                    config=config,
                    overall=overall,
                    categories=per,
                    settings={"all": setting.describe()},
                    lead_words=setting.lead_words,
                )
            )
        rows += [_guard_row(bed, guard, calls, mask, equivalences, base, how, mode, prices)
                 for guard in ("audit", "prove")]  # fmt: skip
        served = _table_answers(calls, mask, how.embedder, mode, equivalences, prices, how.seed)
        overall, per = _figures_of(served, calls, mask, equivalences)
        rows.append(
            ReplayRow(bed=bed, mode=mode.value, config="serve", overall=overall, categories=per)
        )
    drawn = _table_answers(calls, mask, how.embedder, None, equivalences, prices, how.seed)
    overall, per = _figures_of(drawn, calls, mask, equivalences)
    rows.append(ReplayRow(bed=bed, mode="-", config="random", overall=overall, categories=per))
    return rows


def _guard_row(
    bed: str,
    guard: Literal["audit", "prove"],
    calls: Sequence[ReplayCall],
    mask: Sequence[bool],
    equivalences: Mapping[str, Callable[[str, str], bool]],
    base: CacheConfig,
    how: _Replays,
    mode: EmbedMode,
    prices: PriceTable,
) -> ReplayRow:
    """A guard from the static default (the audit guard serves from there and tightens what
    its audits show over δ; the proving guard descends from there once proven), over the whole
    stream: it learns on the tuning part and goes on learning in the held-out part. The audit
    guard's draws are seeded: ``guard_seeds`` of them (its figures are the first seed's)."""
    config = base.updated(
        embed=mode, threshold=STATIC_THRESHOLD, guard=guard, wrong_hit_budget=how.delta
    )
    reports = [
        replay(calls, config, embedder=how.embedder, seed=how.seed + k, prices=prices)
        for k in range(how.guard_seeds if guard == "audit" else 1)
    ]
    overall, per = _figures_of(reports[0].results, calls, mask, equivalences)
    return ReplayRow(
        bed=bed,
        mode=mode.value,
        config=guard,
        overall=overall,
        categories=per,
        settings={
            "all": f"{mode.value} mode, from threshold {STATIC_THRESHOLD:.2f}, "
            f"δ = {100 * how.delta:g} points"
        },
        guards=_guard_stories(
            [r.results for r in reports], STATIC_THRESHOLD, audit=guard == "audit"
        ),
        asked_share=_asked_share(reports[0].results, mask, audit=guard == "audit"),
    )


def _asked_share(results: Sequence[CallResult], mask: Sequence[bool], *, audit: bool) -> float:
    """What the checked calls a guard asked beside the served ones (audits, or explorations)
    cost without a cache, as a share of what all the checked calls cost without one."""
    checked = [r for r, m in zip(results, mask, strict=True) if m]
    bill = sum(r.baseline_usd for r in checked)
    asked = sum(r.baseline_usd for r in checked if (r.audited if audit else r.explored))
    return asked / bill if bill > 0 else 0.0


def _split(runs: Sequence[int]) -> str:
    tuned = runs[:-1]
    named = f"run {tuned[0]}" if len(tuned) == 1 else f"runs {', '.join(map(str, tuned))}"
    return f"tuned on {named}, reported on run {runs[-1]}"


def _guard_stories(
    seeds: Sequence[Sequence[CallResult]], start: float, *, audit: bool
) -> dict[str, GuardStory]:
    """Per category, what a guard did over each seed's whole stream: its asks beside the served
    answers (audits, or explorations under the proving guard) and how many came before the
    threshold in force first rose above ``start`` (for the proving guard, before it first
    served another prompt's answer: its threshold stands above every cosine until a proof)."""
    stories: dict[str, GuardStory] = {}
    for results in seeds:
        asked: Counter[str] = Counter()
        moved: dict[str, int | None] = {}
        closed: dict[str, bool] = {}
        for r in results:
            if r.category not in moved:
                moved[r.category], closed[r.category] = None, False
            rose = r.threshold is not None and r.threshold > start + 1e-9
            if audit and moved[r.category] is None and rose:
                moved[r.category] = asked[r.category]
                closed[r.category] = r.closed
            # An answer stored for the very same prompt is served at once, proof or none: the
            # proving guard has proved a threshold only when it serves another prompt's.
            proved = r.served is not None and not r.identical
            if not audit and moved[r.category] is None and proved:
                moved[r.category] = asked[r.category]
            asked[r.category] += int(r.audited if audit else r.explored)
        for category in moved:
            story = stories.setdefault(category, GuardStory(asked=[], moved_after=[], closed=[]))
            story.asked.append(asked[category])
            story.moved_after.append(moved[category])
            story.closed.append(closed[category])
    return dict(sorted(stories.items()))


def _samples(
    calls: Sequence[ReplayCall], n: int, seed: int
) -> tuple[dict[str, list[AnswerSample]], dict[str, int], dict[str, int], dict[str, int]]:
    """Per category of the held-out run: a seeded sample of its answers, how many there are,
    and how many echo their format's placeholder or are degenerate."""
    by_category: dict[str, list[ReplayCall]] = defaultdict(list)
    for call in calls:
        by_category[call.category].append(call)
    samples: dict[str, list[AnswerSample]] = {}
    counts: dict[str, int] = {}
    echoes: dict[str, int] = {}
    broken: dict[str, int] = {}
    for category, group in sorted(by_category.items()):
        rng = random.Random(f"{seed}:{category}:sample")
        picked = rng.sample(group, min(n, len(group)))
        samples[category] = [
            AnswerSample(agent=c.agent, keywords=list(c.keywords or []), answer=c.answer)
            for c in picked
        ]
        counts[category] = len(group)
        flags = [template(category).flaws(c.answer) for c in group]
        echoes[category] = sum(e for e, _ in flags)
        broken[category] = sum(d for _, d in flags)
    return samples, counts, echoes, broken


def _stream(runs: Mapping[int, Sequence[ReplayCall]]) -> tuple[list[ReplayCall], list[bool]]:
    """The runs one after another (each call's time its place in the stream), and which calls
    are the last run's (the check part)."""
    last = max(runs)
    calls: list[ReplayCall] = []
    mask: list[bool] = []
    for n in sorted(runs):
        for call in runs[n]:
            calls.append(call.model_copy(update={"time": float(len(calls))}))
            mask.append(n == last)
    # tune's time split must cut exactly there: the check part is the last run's calls.
    assert check_mask(calls, "time", sum(mask) / len(calls)) == mask
    return calls, mask


@dataclass
class _Recording:
    """The town recording as the study replays it: its runs (their answers read as the
    validated responses they are), where they came from, and how much of it was found in the
    town's runs."""

    runs: dict[int, list[ReplayCall]]
    provenance: dict[str, Any]
    source: str
    model: str
    found: int
    shipped: int  # vectors taken from the recording's own store


def _read_town(
    recording: Path | None,
    town_runs: Path,
    stored: StoredEmbedder,
    agents: Sequence[str] | None,
    say: Callable[[str], None],
) -> _Recording:
    """The recording in ``recording`` (``None``: the committed one, and while there is none,
    the town runs' own answers, one each), only ``agents``' calls if given."""
    if recording is None:
        recording = committed_recording()
    provenance: dict[str, Any] = {}
    shipped = 0
    if recording is not None:  # a recording asked for and missing is an error, not a fallback
        runs, provenance = read_recording_dir(recording)
        # Vectors shipped beside the recording (the pinned embedder's, by each text's sha256)
        # spare a new directory embedding every prompt again: most of a fresh study's time.
        shipped = stored.add_from(recording / RECORDING_EMBEDDINGS)
        if shipped:
            say(f"embeddings: {shipped} texts' vectors from the recording")
        source = f"the recording in {_shown(recording)} ({len(runs)} runs)"
        # A recording names the town runs its prompts came from (benchmarks/record_town.py
        # writes ``source``); their queries hold the requirements the answers are graded by.
        if town_runs == TOWN_RUNS and isinstance(provenance.get("source"), str):
            town_runs = _ROOT / provenance["source"]
    town = {n: load_run(path, n) for n, path in _town_paths(town_runs).items()}
    if recording is None:
        runs = _dev_recording(town)
        source = (
            f"the town's committed runs ({_shown(town_runs)}), one answer each "
            "(no recording was found)"
        )
    model = _model_of(runs, provenance)
    if agents is not None:
        kept = set(agents)
        runs = {n: [c for c in calls if c.agent in kept] for n, calls in runs.items()}
        if not all(runs.values()):
            raise ValueError(f"the recording holds no calls of {', '.join(sorted(kept))}")
        source += f", the calls of {', '.join(sorted(kept))}"
    known = {messages_key(p.messages): p for prompts in town.values() for p in prompts}
    found = sum(messages_key(c.messages) in known for calls in runs.values() for c in calls)
    runs = {
        n: [_canonical(c, _town_call(known.get(messages_key(c.messages)))) for c in calls]
        for n, calls in runs.items()
    }
    return _Recording(runs, provenance, source, model, found, shipped)


def _town_bed(
    town: _Recording, how: _Replays, say: Callable[[str], None]
) -> tuple[ReplayBed, list[ReplayCall]]:
    """The town recording's bed (tuned on its first runs, reported on its last) and the
    held-out run's calls."""
    calls, mask = _stream(town.runs)
    text = TextAgreement(cosine_of(how.embedder), DEFAULT_TEXT_BOUND)
    equivalences = {c: _equivalence(c, text) for c in sorted({c.category for c in calls})}
    say(f"town: {len(calls)} calls, {sum(mask)} of them in run {max(town.runs)}")
    rows = _bed("town", calls, mask, equivalences, how)
    held_out = [c for c, m in zip(calls, mask, strict=True) if m]
    bed = ReplayBed(
        name="town",
        source=town.source,
        model=town.model,
        equivalence="the template's own acceptability (Template.acceptable)",
        split=_split(sorted(town.runs)),
        tune_calls=len(calls) - len(held_out),
        check_calls=len(held_out),
        rows=rows,
        provenance=town.provenance,
        requirements_found=town.found,
    )
    return bed, held_out


def _park_bed(park: Path, how: _Replays, say: Callable[[str], None]) -> ReplayBed:
    """The shared agent's day, split by time."""
    calls = _park_calls(park)
    mask = check_mask(calls, "time", 0.5)
    within = {c: _within_one for c in {c.category for c in calls}}
    say(f"shared agent: {len(calls)} calls")
    return ReplayBed(
        name="shared agent",
        source=f"the shared agent's day ({park.name}), Park et al.'s recorded ratings",
        model="gpt-3.5-turbo",
        equivalence="within 1",
        split="by time: tuned on the first half of the day, reported on the second",
        tune_calls=len(calls) - sum(mask),
        check_calls=sum(mask),
        rows=_bed("shared agent", calls, mask, within, how),
    )


def _dev_bed_present(folder: Path) -> bool:
    """Whether ``folder`` holds every agent of the development bed."""
    module = _park_module()
    agents = (*module.BED_TUNE_AGENTS, *module.BED_CHECK_AGENTS)
    return all((folder / agent / "nodes.json").exists() for agent in agents)


def _dev_bed(folder: Path, how: _Replays, say: Callable[[str], None]) -> ReplayBed:
    """The gpt-4o-mini development bed, split by agents (learned on its tune agents,
    reported on its check agents), with the exact-repeats row."""
    calls, mask, check_agents = _dev_bed_calls(folder)
    tune_agents = list(dict.fromkeys(c.agent for c, m in zip(calls, mask, strict=True) if not m))
    within = {c: _within_one for c in sorted({c.category for c in calls})}
    say(f"gpt-4o-mini bed: {len(calls)} calls, {sum(mask)} of them of {', '.join(check_agents)}")
    model: str = _park_module().BED_MODEL
    return ReplayBed(
        name="development bed",
        source=f"the {model} development bed ({folder.name}): "
        f"{len(tune_agents) + len(check_agents)} agents of one run of Park et al.'s code, "
        "their recorded ratings",
        model=model,
        equivalence="within 1",
        split=f"by agents: tuned on {', '.join(tune_agents)}; reported on "
        f"{', '.join(check_agents)}",
        tune_calls=len(calls) - sum(mask),
        check_calls=sum(mask),
        rows=_bed("development bed", calls, mask, within, how, split="agents", exact=True),
    )


def replay_study(
    *,
    recording: Path | None = None,
    town_runs: Path = TOWN_RUNS,
    embedder: Embedder,
    embeddings: Path | None = None,
    modes: Sequence[EmbedMode] = (EmbedMode.KEYWORD, EmbedMode.FULL),
    delta: float = 0.05,
    thresholds: Sequence[float] = DEFAULT_STUDY_THRESHOLDS,
    park: Path | None = PARK,
    dev_bed: Path | None = DEV_BED,
    agents: Sequence[str] | None = None,
    seed: int = 0,
    guard_seeds: int = 1,
    progress: Callable[[str], None] | None = None,
) -> ReplayStudyResult:
    """The replay study (see the module docstring) of the recording in ``recording`` (a
    directory; ``None``: the committed one, :data:`DEFAULT_RECORDING`, and while there is
    none, the town runs' own answers, one each, as the recording),
    the queries' requirements read from the town runs in ``town_runs``; beside it the shared
    agent's day from ``park`` and the gpt-4o-mini bed from ``dev_bed`` when those folders
    exist. ``embeddings``: where the embedded
    texts are kept between runs. ``agents``: only the calls of these agents (their tables
    whole), for a shorter study. ``guard_seeds``: how many seeded replays the audit guard's
    catch is read over (its row's figures are the first seed's)."""
    started = time.perf_counter()
    say = progress or (lambda _: None)
    stored = StoredEmbedder(embedder, embeddings)
    in_store = len(stored)
    town = _read_town(recording, town_runs, stored, agents, say)
    how = _Replays(stored, modes, delta, thresholds, seed, guard_seeds)
    bed, held_out = _town_bed(town, how, say)
    samples, answers, echoes, broken = _samples(held_out, _SAMPLES, seed)
    beds = [bed]
    if park is not None and (park / "nodes.json").exists():
        beds.append(_park_bed(park, how, say))
    if dev_bed is not None and _dev_bed_present(dev_bed):
        beds.append(_dev_bed(dev_bed, how, say))
    elif dev_bed is not None:
        say(
            f"gpt-4o-mini bed skipped: {dev_bed.name}/ (the shared benchmarks' folder beside "
            "the repository) is absent or lacks an agent's nodes.json"
        )
    stored.save()
    return ReplayStudyResult(
        delta=delta,
        seed=seed,
        beds=beds,
        samples=samples,
        answers=answers,
        placeholder_echoes=echoes,
        degenerate=broken,
        seconds=round(time.perf_counter() - started, 1),
        embedded=stored.computed,
        embeddings_at_hand=in_store + town.shipped,
    )
