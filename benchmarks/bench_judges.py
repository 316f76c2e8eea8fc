"""Judge protocols on the local models: does the judge prefer the true answer to a random one?

Draws ``--pairs`` (true answer, random same-table answer) pairs, seeded, from a committed
standard run (default ``docs/results/standard/data/run3.jsonl.gz``), spread over the categories
in turn, skipping a pair whose two answers are the same text (no preference to find). Each
model on a local llama.cpp server judges every pair with each protocol:

- ``rank``: ``LLMJudge`` on the two candidates, a seeded order then its reverse, combined
  (the study's default; what the quality step's pairwise judge does);
- ``pairwise-odds``: ``PairwiseJudge``, both orders combined, the preference read from the
  A/B token odds (``logprobs``);
- ``pairwise-letter``: the same answers as ``pairwise-odds`` read from the one sampled letter
  (no extra calls: each completion is kept and read again without its logprobs);
- ``score``: ``ScoreJudge``, each answer scored alone from 1 to 9, the expectation over the
  digit's token odds (no order to reverse: order-free by construction);
- ``score-digit``: the same answers as ``score`` read from the one sampled digit;
- ``answer-first``: ``AnswerFirstJudge``, the model answers the task itself (a rating as its
  expectation over the digit's odds) and the closer candidate wins (order-free by
  construction).

Two beds (``--bed``):

- ``town`` (default): pairs of a committed town run, whose true answers are the town model's;
  a judge can only prefer them as far as that model's answers beat a random one;
- ``park``: the shared agent's memories (``../shared/benchmarks/park_demo_isabella/``) through
  Park's importance prompt, the true answer gpt-3.5-turbo's recorded rating, the random one
  another memory's recorded rating (a different number): the one bed whose true answers are
  known to beat random ones (its own repeats agree far more often than a random rating does).

It prints, per model and protocol: true over random (a tie counts half) and single-order
reversal agreement, each with its 95% Wilson interval, failures and seconds per pair. Chance
is 50%. ``--deadline`` (UTC HH:MM) stops between pairs and reports what was judged.

    .venv/bin/python benchmarks/bench_judges.py --models qwen2.5-coder-1.5b --pairs 60
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench_model_choice import park_sample  # a sibling script (benchmarks/ is on the path)

from experiments._answer_first_judge import AnswerFirstJudge
from experiments._data import load_run
from experiments._judge import JudgeCandidate, Judgement, JudgeQuery, LLMJudge, reliability
from experiments._pairwise_judge import PairwiseJudge, preference
from experiments._score_judge import ScoreJudge, expected_score

ROOT = Path(__file__).resolve().parents[1]


class _Keeping:
    """Passes requests to a client and keeps every completion's first choice."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.kept: list[Any] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> Any:
        completion = self._client.chat.completions.create(**kwargs)
        if completion.choices:
            self.kept.append(completion.choices[0])
        return completion


def pairs(path: Path, n: int, seed: int) -> list[JudgeQuery]:
    prompts = load_run(path, 3)
    by_table: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        by_table[p.key].append(i)
    rng = random.Random(f"{seed}:judge-pairs")
    by_category: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        if len(by_table[p.key]) > 1:
            by_category[p.category].append(i)
    for items in by_category.values():
        rng.shuffle(items)
    out: list[JudgeQuery] = []
    while len(out) < n and any(by_category.values()):
        for category in sorted(by_category):
            if not by_category[category] or len(out) >= n:
                continue
            q = prompts[by_category[category].pop()]
            other = prompts[rng.choice([j for j in by_table[q.key] if j != q.index])]
            if other.response.strip() == q.response.strip():
                continue
            out.append(
                JudgeQuery(
                    query_id=f"bench:{q.run}:{q.index}",
                    category=q.category,
                    group=q.group,
                    prompt=q.prompt_text,
                    truth=q.response,
                    candidates=[
                        JudgeCandidate(label="random", text=other.response),
                        JudgeCandidate(label="true", text=q.response),
                    ],
                )
            )
    return out


def park_pairs(n: int, seed: int) -> list[JudgeQuery]:
    """``n`` of the shared agent's distinct memories: gpt-3.5-turbo's rating against another's."""
    items, _ = park_sample(10**6, seed)
    rng = random.Random(f"{seed}:judge-park")
    out: list[JudgeQuery] = []
    for i, (messages, rating) in enumerate(items[:n]):
        others = [r for _, r in items if r != rating]
        if not others:
            continue
        out.append(
            JudgeQuery(
                query_id=f"park:{i}",
                category="importance",
                group="importance",
                prompt=messages[-1]["content"],
                truth=str(rating),
                candidates=[
                    JudgeCandidate(label="random", text=str(rng.choice(others))),
                    JudgeCandidate(label="true", text=str(rating)),
                ],
            )
        )
    return out


def _share(r: Any) -> str:
    if r is None or r.rate is None:
        return "n/a"
    return f"{100 * r.rate:.1f}% [{100 * r.low:.1f}, {100 * r.high:.1f}] of {r.pairs}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bed", choices=["town", "park"], default="town")
    ap.add_argument("--run", default=str(ROOT / "docs/results/standard/data/run3.jsonl.gz"))
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-1.5b"])
    ap.add_argument("--protocols", nargs="+", default=["pairwise-odds", "rank"])
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-chars", type=int, default=600)
    ap.add_argument("--deadline", help="UTC HH:MM: stop judging then, report what was judged")
    args = ap.parse_args()

    from llmcache.embedders import default_embedder
    from llmcache.llm import LocalServer

    embedder = default_embedder()

    if args.bed == "park":
        queries = park_pairs(args.pairs, args.seed)
        source = "the shared agent's recorded ratings"
    else:
        queries = pairs(Path(args.run), args.pairs, args.seed)
        source = Path(args.run).name
    print(f"{len(queries)} pairs from {source}, categories:", end=" ")
    counts: dict[str, int] = defaultdict(int)
    for q in queries:
        counts[q.category] += 1
    print(", ".join(f"{c} {n}" for c, n in sorted(counts.items())))
    stop = None
    if args.deadline:
        hh, mm = (int(x) for x in args.deadline.split(":"))
        now = dt.datetime.now(dt.UTC)
        stop = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    rows = []
    for model in args.models:
        with LocalServer(model, parallel=1) as server:
            for protocol in args.protocols:
                keeping = _Keeping(server.client())
                if protocol == "rank":
                    judge: Any = LLMJudge(
                        keeping, model=server.model, shuffles=2, max_chars=args.max_chars
                    )
                elif protocol == "answer-first":
                    judge = AnswerFirstJudge(keeping, embedder, model=server.model)
                elif protocol == "score":
                    judge = ScoreJudge(keeping, model=server.model, max_chars=args.max_chars)
                else:
                    judge = PairwiseJudge(
                        keeping, model=server.model, logprobs=True, max_chars=args.max_chars
                    )
                judged: list[Judgement] = []
                letters: list[Judgement] = []
                t0 = time.perf_counter()
                for q in queries:
                    if stop is not None and dt.datetime.now(dt.UTC) >= stop:
                        break
                    before = len(keeping.kept)
                    j = judge.judge(q)
                    judged.append(j)
                    if protocol == "score":
                        letters.append(_by_digits(q, keeping.kept[before:], j))
                    elif protocol == "pairwise-odds":
                        letters.append(_by_letters(judge, q, keeping.kept[before:], j))
                    if len(judged) % 5 == 0:  # partial figures, in case the deadline comes
                        r = reliability(protocol, judged)
                        print(
                            f"  {model} {protocol} after {len(judged)} pairs: true over random "
                            f"{_share(r.true_over_random)}, reversal {_share(r.reversal)}",
                            flush=True,
                        )
                seconds = (time.perf_counter() - t0) / max(1, len(judged))
                found = [(protocol, judged)]
                if protocol == "score":
                    found.append(("score-digit", letters))
                elif protocol == "pairwise-odds":
                    found.append(("pairwise-letter", letters))
                for name, js in found:
                    r = reliability(name, js)
                    failed = sum(j.failed for j in js)
                    row = (
                        f"| {model} | {name} | {_share(r.true_over_random)} | "
                        f"{_share(r.reversal)} | {failed} | {seconds:.1f} |"
                    )
                    print(row, flush=True)
                    rows.append(row)
    print()
    print(
        "| model | protocol | true over random | reversal agreement, one order | failed | s/pair |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


def _by_digits(q: JudgeQuery, choices: list[Any], j: Judgement) -> Judgement:
    """The same two scores of a ``ScoreJudge`` on ``q``, read from the sampled digits only."""
    digits = [expected_score({"message": {"content": c.message.content}}) for c in choices]
    if j.failed or len(digits) != 2 or any(d is None for d in digits):
        return Judgement(query_id=q.query_id, group=q.group, judge="digits", failed=True)
    # The candidates are scored in the query's order: "random" first, then "true".
    random_score, true_score = digits
    ranks = (
        {"random": 1.5, "true": 1.5}
        if random_score == true_score
        else {"random": 1.0, "true": 2.0}
        if random_score > true_score  # type: ignore[operator]
        else {"random": 2.0, "true": 1.0}
    )
    return Judgement(query_id=q.query_id, group=q.group, judge="digits", ranks=ranks)


def _by_letters(judge: PairwiseJudge, q: JudgeQuery, choices: list[Any], j: Judgement) -> Judgement:
    """The same two answers of ``judge`` on ``q``, read from the sampled letters only."""
    letters = [preference({"message": {"content": c.message.content}}, ties=True) for c in choices]
    if j.failed or len(letters) != 2 or any(p is None for p in letters):
        return Judgement(query_id=q.query_id, group=q.group, judge="letters", failed=True)
    (a, _b), _ = judge.presentation_orders(q, "random", "true")
    # P("random" better) in each order: the first order shows ``a`` as A.
    first = letters[0] if a == "random" else 1.0 - letters[0]  # type: ignore[operator]
    second = 1.0 - letters[1] if a == "random" else letters[1]  # type: ignore[operator]
    p_random = (first + second) / 2
    ranks = (
        {"random": 1.5, "true": 1.5}
        if p_random == 0.5
        else {"random": 1.0, "true": 2.0}
        if p_random > 0.5
        else {"random": 2.0, "true": 1.0}
    )
    same = 0.5 if 0.5 in (first, second) else float((first > 0.5) == (second > 0.5))
    return Judgement(
        query_id=q.query_id,
        group=q.group,
        judge="letters",
        ranks=ranks,
        reversal_pairs=1,
        reversal_same=same,
    )


if __name__ == "__main__":
    main()
