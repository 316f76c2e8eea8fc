"""The whole study, end to end, on test doubles: every step runs and writes what it should.

The scripted town (agent_core.testing.ScriptedLLM) and the hash embedder make this fast and
deterministic; they test the plumbing only. Measured results come from the real local model
(``test_reproduce_quick.py``, slow).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from study_support import StandIn

from agent_core import TextAgreement
from agent_core.testing import ScriptedLLM
from experiments import Profile
from experiments._budget_study import STATIC_THRESHOLD, budget_study
from experiments._collect import run_paths
from experiments._data import load_run, messages_key
from experiments._report import write_report
from experiments._reproduce import EXPERIMENTS, Study, reproduce
from experiments._results import (
    BudgetResult,
    CollectResult,
    CompareResult,
    CostResult,
    QualityResult,
    load_result,
)
from llmcache.recording import RecordedCall, Recorder
from llmcache.testing import HashEmbedder


class _RankingOrScripted:
    """ScriptedLLM for the town's prompts; a judge that always ranks in presented order."""

    def __init__(self) -> None:
        self.town = ScriptedLLM(seed=1)
        self.chat = self
        self.completions = self
        self.rankings = 0
        self.ranking_models: Counter[tuple[int, str]] = Counter()  # (candidates, model)

    def create(self, **kwargs: Any) -> ChatCompletion:
        fmt = kwargs.get("response_format") or {}
        schema = fmt.get("json_schema") or {}
        if schema.get("name") != "ranking":
            return self.town.chat.completions.create(**kwargs)
        self.rankings += 1
        n = schema["schema"]["properties"]["ranking"]["maxItems"]
        self.ranking_models[(n, kwargs["model"])] += 1
        return ChatCompletion.model_validate(
            {
                "id": f"rank-{self.rankings}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": kwargs["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {
                            "role": "assistant",
                            "content": json.dumps({"ranking": list(range(1, n + 1))}),
                        },
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


class _StandIn(StandIn):
    def __init__(self) -> None:
        super().__init__(_RankingOrScripted())


TINY = Profile(
    name="tiny",
    runs=3,
    days=0.25,
    agents=["Alice Wilson", "Ethan Wilson"],
    max_attempts=2,
    escalate=False,
    similarity_queries=5,
    correlation_queries=2,
    compare_queries=2,
    thresholds=3,
    llm_judge_queries=3,
    revise_budget=2,
    judge_tier="default",
)


@pytest.fixture(scope="module")
def stand_in() -> _StandIn:
    return _StandIn()


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory, stand_in: _StandIn) -> Path:
    out = tmp_path_factory.mktemp("study")
    study = Study(TINY, out, progress=False, embedder=HashEmbedder(), _conn=stand_in)  # type: ignore[arg-type]
    # The replay study on the small committed recording, without the shared agent's day.
    study.recording = Path(__file__).parent / "data" / "replay_recording"
    study.park = None
    study.dev_bed = None
    reproduce(study)
    write_report(
        out,
        TINY,
        llm="scripted test double",
        judge_model="scripted",
        embedder="hash",
        timings=study.timings,
        command="test",
    )
    study.close()
    return out


def test_every_experiment_writes_its_json(study_dir: Path) -> None:
    for name in EXPERIMENTS:
        assert (study_dir / f"{name}.json").exists(), name
    collect = load_result(CollectResult, study_dir / "collect.json")
    assert [r.seed for r in collect.runs] == [1, 2, 3]
    for r in collect.runs:
        assert r.prompts_kept > 0
        assert "agent reaction" not in r.per_category  # dialogue is dropped
        assert sum(r.per_category.values()) == r.prompts_kept


def test_the_report_puts_study_and_ours_side_by_side(study_dir: Path) -> None:
    text = (study_dir / "report.md").read_text()
    assert "| quantity | study | ours | why they differ |" in text
    for needle in ("17,201", "0.861", "0.952", "80.3%", "62.7%", "Pearson r"):
        assert needle in text, needle


def test_the_report_says_what_the_run_measured_not_canned_claims(study_dir: Path) -> None:
    text = (study_dir / "report.md").read_text()
    collect = load_result(CollectResult, study_dir / "collect.json")
    # The model named is the one that ran; nothing about a model that did not.
    model = collect.runs[0].llm
    assert model and f"sample on {model}" in text
    assert "135M" not in text and "~60 s" not in text
    # Every category's calls: asked, valid at the first try, resubmitted, escalated, fell back,
    # with the counts the runs recorded.
    assert "| category | asked | valid at the first try |" in text
    assert "| fell back | echo a placeholder | degenerate |" in text
    for category in collect.runs[0].categories:
        asked = sum(r.categories[category].asked for r in collect.runs if category in r.categories)
        assert f"| {category} | {asked} | " in text
    counts = collect.runs[0].categories
    assert sum(c.asked for c in counts.values()) == collect.runs[0].prompts_recorded


def test_the_pairwise_judge_asks_the_superior_model(study_dir: Path, stand_in: _StandIn) -> None:
    # The pairwise judge ranks two candidates on the superior tier; the rankings of more
    # candidates (correlation, compare) stay on judge_tier.
    asked = stand_in.client.ranking_models
    assert {n for n, m in asked if m == "scripted-superior"} == {2}
    assert {m for n, m in asked if n > 2} == {"scripted"}
    quality = load_result(QualityResult, study_dir / "quality.json")
    assert set(quality.reliability) == {"pairwise (scripted-superior)"}
    assert "pairwise (scripted-superior)" in (study_dir / "report.md").read_text()


def test_every_judge_is_measured_against_chance(study_dir: Path) -> None:
    # The scripted judges rank in the order shown: position alone, so never above chance.
    quality = load_result(QualityResult, study_dir / "quality.json")
    pairwise = quality.reliability["pairwise (scripted-superior)"]
    assert pairwise.true_over_random is not None and pairwise.true_over_random.pairs > 0
    assert pairwise.reversal is not None and pairwise.reversal.rate == 0.0
    assert pairwise.verdict == "at chance"
    compare = load_result(CompareResult, study_dir / "compare.json")
    assert compare.reliability["reference"].verdict != "not measured"
    text = (study_dir / "report.md").read_text()
    assert "not a finding: the judge is at chance" in text


def test_cost_replay_goes_through_cachedllm(study_dir: Path) -> None:
    cost = load_result(CostResult, study_dir / "cost.json")
    for mode in ("full", "keyword"):
        r = cost.replay[mode]
        assert r.calls > 0 and r.hits > 0
        assert r.spent_usd < cost.replay["none"].spent_usd
    assert cost.models == {"llm": "gpt-4o-mini", "embed": "text-embedding-3-small"}
    rows = {row.mode: row for row in cost.summary()}
    assert rows["none"].replay_saving == 0.0
    assert 0 < (rows["keyword"].replay_saving or 0) < 1
    by = {m.mode: m for m in cost.study_prices}
    assert by["none"].reduction == 0.0
    assert by["keyword"].building_usd < by["full"].building_usd


class _Counting:
    """A live model that counts what it is asked and answers like the scripted town."""

    def __init__(self) -> None:
        self.town = ScriptedLLM(seed=3)
        self.asked: list[Any] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs: Any) -> ChatCompletion:
        self.asked.append(kwargs["messages"])
        return self.town.chat.completions.create(**kwargs)


def test_the_cost_replay_asks_the_model_only_for_revisions(study_dir: Path) -> None:
    # A miss is answered by the call the held-out run made (its recorded answer and usage):
    # the model is asked only what the run never asked, i.e. revisions of cached answers.
    from experiments._cost import study_price_table
    from experiments._cost_study import _replay

    table_run = load_run(run_paths(study_dir, 1)[0], 1)
    held_out = load_run(run_paths(study_dir, TINY.runs)[0], TINY.runs)
    live = _Counting()
    out = _replay(
        table_run,
        held_out,
        client=live,
        model="scripted",
        embedder=HashEmbedder(),
        max_attempts=2,
        prices=study_price_table(),
        seed=0,
        progress=None,
    )
    recorded = {messages_key(q.messages) for q in held_out}
    assert not any(messages_key(m) in recorded for m in live.asked)
    assert len(live.asked) == out["full"].revise_calls + out["keyword"].revise_calls
    for mode in ("full", "keyword"):
        assert out[mode].calls == len(held_out) and out[mode].hits > 0


def test_cached_steps_are_not_recomputed(study_dir: Path) -> None:
    before = {n: (study_dir / f"{n}.json").stat().st_mtime_ns for n in EXPERIMENTS}
    study = Study(TINY, study_dir, progress=False, embedder=HashEmbedder(), _conn=_StandIn())  # type: ignore[arg-type]
    reproduce(study)
    study.close()
    after = {n: (study_dir / f"{n}.json").stat().st_mtime_ns for n in EXPERIMENTS}
    assert before == after


def test_load_run_drops_dialogue_and_resubmissions(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    meta = {"sim_minute": 400, "observed_actors": 3}
    with Recorder(path) as rec:
        rec.record(
            RecordedCall(
                category="importance score",
                agent="A",
                keywords=["x"],
                messages=msgs,
                model="m",
                response='{"score": 3}',
                metadata=meta,
            )
        )
        rec.record(
            RecordedCall(
                kind="invalid_attempt",
                resubmission=True,
                valid=False,
                category="importance score",
                agent="A",
                messages=msgs,
                model="m",
                response="nope",
                metadata=meta,
            )
        )
        rec.record(
            RecordedCall(
                category="dialogue utterance",
                agent="A",
                messages=msgs,
                model="m",
                response='{"utterance": "hi"}',
                metadata=meta,
            )
        )
        rec.record(
            RecordedCall(
                category="importance score",
                agent="A",
                keywords=["y z"],
                messages=msgs,
                model="m",
                response='{"score": 5}',
                metadata={**meta, "sim_minute": 460},
            )
        )
    prompts = load_run(path, 1)
    assert [p.response for p in prompts] == ['{"score": 3}', '{"score": 5}']
    assert [p.elapsed_minutes for p in prompts] == [0, 60]
    assert prompts[1].description("keyword") == "y z"
    assert prompts[1].description("full").startswith("system: s")
    assert prompts[0].group == "importance"


def test_saturation_tables_come_from_runs_2_to_4_and_the_last_run_is_held_out(
    tmp_path: Path,
) -> None:
    from experiments import FULL, QUICK

    assert Study(FULL, tmp_path, embedder=HashEmbedder()).table_runs == [2, 3, 4]
    assert Study(QUICK, tmp_path, embedder=HashEmbedder()).table_runs == [2, 3]


def test_the_budget_step_accounts_for_every_held_out_query(study_dir: Path) -> None:
    budget = load_result(BudgetResult, study_dir / "budget.json")
    held_out = load_run(run_paths(study_dir, TINY.runs)[0], TINY.runs)
    configs = {(r.mode, r.config, r.budget, r.pooled) for r in budget.runs}
    assert configs == {
        (m, *c)
        for m in ("keyword", "full")
        for c in [
            *(("budget", b, pooled) for b in TINY.budgets for pooled in (True, False)),
            *(("audit", b, True) for b in TINY.budgets),
            ("static", None, True),
            ("serve", None, True),
            ("random", None, True),
        ]
    }
    for r in budget.runs:
        total = r.groups["all"]
        assert total.queries == len(held_out)
        assert sum(g.queries for name, g in r.groups.items() if name != "all") == total.queries
        assert total.hits <= total.queries - total.untried - total.failed
        assert total.acceptable is not None and total.acceptable.answers == total.hits
        # Every pair is a served query; the overall pairs are the groups' together.
        assert total.paired.pairs <= total.hits
        groups = [g for name, g in r.groups.items() if name != "all"]
        assert total.paired.pairs == sum(g.paired.pairs for g in groups)
        assert r.revise_calls <= TINY.revise_budget
    # The second answers are shared: never more than the queries served in any way.
    assert budget.reanswers_asked <= len(held_out)
    text = (study_dir / "report.md").read_text()
    assert "## Wrong-hit budget" in text and "**Headline**:" in text
    for r in budget.runs:
        if r.config == "budget" and r.pooled:
            # The goal sentences are read off the run.
            assert f"{r.mode}, δ = {r.budget:g}: overall cost cut" in text
        if r.config == "audit":
            # The audit guard starts at the static default; its audits are counted apart.
            assert r.threshold == STATIC_THRESHOLD
            total = r.groups["all"]
            assert total.explored == 0 and total.audit_usd <= total.spent_usd
            assert f"{r.mode}, audit guard δ = {r.budget:g} from" in text
            assert "would-be hits audited, costing" in text


def test_a_run_served_from_its_own_full_prompts_serves_no_wrong_answer(study_dir: Path) -> None:
    run1 = load_run(run_paths(study_dir, 1)[0], 1)
    # A prompt asked twice may have two true answers; keep those asked once.
    seen = Counter(messages_key(p.messages) for p in run1)
    once = [p for p in run1 if seen[messages_key(p.messages)] == 1]
    result = budget_study(
        run1,
        once,
        texts=lambda category: TextAgreement(lambda a, b: float(a == b), 0.99),
        embedder=HashEmbedder(),
        client=None,  # revise_budget=0: no revision is ever sent
        model="scripted",
        budgets=[0.05],
        revise_budget=0,
        max_attempts=1,
    )
    for r in result.runs:
        total = r.groups["all"]
        assert total.queries == len(once)
        if r.mode == "full" and r.config in ("static", "budget"):
            # Every query is word for word an entry: served, it is its own true answer.
            assert total.acceptable is not None
            assert total.acceptable.acceptable == total.hits, r
            # The static threshold serves them; a budget only once labels prove a threshold.
            assert total.hits > 0 or r.budget is not None, r


def test_a_study_reruns_from_recorded_runs_kept_compressed(study_dir: Path, tmp_path: Path) -> None:
    import gzip
    import shutil

    # The committed form: each run's dataset compressed, beside its summary.
    kept = tmp_path / "committed"
    kept.mkdir()
    for n in range(1, TINY.runs + 1):
        dataset, summary = run_paths(study_dir, n)
        with dataset.open("rb") as src, gzip.open(kept / f"run{n}.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(summary, kept / summary.name)
    rerun = Study(TINY, tmp_path / "rerun", progress=False, embedder=HashEmbedder(), runs=kept)
    results = reproduce(rerun, steps=["collect", "similarity"])
    rerun.close()
    before = load_result(CollectResult, study_dir / "collect.json")
    after = results["collect"]
    assert isinstance(after, CollectResult)
    assert after.recorded_in == str(kept)
    assert [r.prompts_kept for r in after.runs] == [r.prompts_kept for r in before.runs]
    assert not (tmp_path / "rerun" / "data").exists()  # nothing was simulated
    assert (tmp_path / "rerun" / "similarity.json").exists()
    assert rerun.run(1) == load_run(run_paths(study_dir, 1)[0], 1)


# -- the judge on any OpenAI-compatible endpoint ------------------------------------------------

JUDGE_KEY = "sk-judge-SENTINEL-5b1e0c77a9d3"


class _JudgeServer:
    """A tiny OpenAI-compatible server on 127.0.0.1 (stdlib only) answering chat completions
    with a ranking in the order shown; it records the key and model of every request."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.auth: set[str] = set()
        self.models: Counter[str] = Counter()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.auth.add(self.headers.get("Authorization", ""))
                outer.models[body["model"]] += 1
                schema = (body.get("response_format") or {}).get("json_schema") or {}
                n = schema["schema"]["properties"]["ranking"]["maxItems"] if schema else 1
                answer = {
                    "id": "judge-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {
                                "role": "assistant",
                                "content": json.dumps({"ranking": list(range(1, n + 1))}),
                            },
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                data = json.dumps(answer).encode()
                self.send_response(200 if self.path.endswith("/chat/completions") else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test's output stays quiet

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_judge_endpoint_reaches_a_local_server_and_its_key_never_reaches_disk(
    study_dir: Path, stand_in: _StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools

    import experiments.__main__ as cli

    server = _JudgeServer()
    monkeypatch.setenv("LLMCACHE_JUDGE_API_KEY", JUDGE_KEY)
    # The study's own LLM (the town, revisions) stays the stand-in; only the judges move.
    monkeypatch.setattr(
        cli, "Study", functools.partial(Study, embedder=HashEmbedder(), _conn=stand_in)
    )
    rankings_before = stand_in.client.rankings
    out = tmp_path / "out"
    judge = ["--judge-base-url", server.url, "--judge-model", "judge-x"]
    common = ["--profile", "quick", "--out", str(out), "--runs", str(study_dir / "data"), "--quiet"]
    try:
        for step in ("compare", "quality", "report"):
            assert cli.main([step, *common, *judge]) == 0
    finally:
        server.close()
    # Every LLM judgement went to the endpoint, with the key from the environment.
    assert server.models.keys() == {"judge-x"} and sum(server.models.values()) > 0
    assert server.auth == {f"Bearer {JUDGE_KEY}"}
    assert stand_in.client.rankings == rankings_before
    compare = load_result(CompareResult, out / "compare.json")
    assert set(compare.reliability) == {"reference", "llm:judge-x"}
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {"compare.json", "quality.json", "study.json", "report.md"} <= {p.name for p in written}
    for path in written:
        assert JUDGE_KEY.encode() not in path.read_bytes(), path
    meta = json.loads((out / "study.json").read_text())
    assert meta["judge_model"] == f"judge-x at {server.url}"
    assert "--judge-base-url" in meta["command"]
    assert f"judge-x at {server.url}" in (out / "report.md").read_text()


def test_a_url_carrying_a_secret_is_recorded_without_it() -> None:
    from experiments._judge_endpoint import JudgeEndpoint, redact_argv

    url = "https://user:sk-inurl@api.example.com:8443/v1?api-key=sk-inquery#x"
    argv = ["compare", "--judge-base-url", url, f"--judge-base-url={url}", "--judge-model", "m"]
    recorded = " ".join(redact_argv(argv))
    assert "sk-inurl" not in recorded and "sk-inquery" not in recorded
    assert recorded.count("https://api.example.com:8443/v1") == 2
    endpoint = JudgeEndpoint.from_env("m", url, {"OPENAI_API_KEY": "sk-fallback"})
    assert endpoint.api_key == "sk-fallback"
    assert "sk-" not in repr(endpoint) and "sk-" not in endpoint.description
    first = JudgeEndpoint.from_env(
        "m", None, {"LLMCACHE_JUDGE_API_KEY": "a", "OPENAI_API_KEY": "b"}
    )
    assert first.api_key == "a" and first.description == "m"
