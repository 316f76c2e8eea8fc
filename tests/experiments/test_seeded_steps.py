"""The later steps of the study give the same results twice (issue 57, item 4).

The runs are recorded once by the scripted town; the later steps (revisions, judge rankings)
then ask a server double that samples as llama.cpp's does: a request with a ``seed`` is answered
from (request, seed), one without from a seed the server draws itself. Without the study's
seeds the two studies below part at the first revision or ranking.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from study_support import StandIn

from agent_core.testing import ScriptedLLM
from experiments import QUICK, Profile
from experiments._reproduce import Study, reproduce
from experiments._seeding import SeededClient, request_seed
from llmcache.testing import FakeOpenAI, HashEmbedder

# The steps after collect that ask the LLM (quick profile: the budget step does not run).
LATER = ("correlation", "compare", "cost", "quality")

TINY = QUICK.model_copy(
    update={
        "name": "tiny-seeded",
        "days": 0.25,
        "agents": ["Alice Wilson", "Ethan Wilson"],
        "correlation_queries": 3,
        "compare_queries": 3,
        "llm_judge_queries": 4,
        "revise_budget": 4,
    }
)


def _completion(kwargs: dict[str, Any], content: str) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "sampled",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": kwargs["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


class _SamplingServer:
    """Answers as a sampling server does: from the request and its seed, or, for a request
    without one, from a seed of its own (drawn from the system's entropy, as a server's is)."""

    def __init__(self) -> None:
        self.chat = self
        self.completions = self
        self.seeds: list[int | None] = []
        self._own = random.SystemRandom()

    def create(self, **kwargs: Any) -> ChatCompletion:
        given = kwargs.get("seed")
        self.seeds.append(given)
        seed = given if given is not None else self._own.randrange(2**31)
        fmt = kwargs.get("response_format") or {}
        schema = fmt.get("json_schema") or {}
        if schema.get("name") == "ranking":
            n = schema["schema"]["properties"]["ranking"]["maxItems"]
            order = list(range(1, n + 1))
            random.Random(f"{seed}:{json.dumps(kwargs['messages'])}").shuffle(order)
            return _completion(kwargs, json.dumps({"ranking": order}))
        # A revision: the scripted town's answer, its choices drawn from the sampling seed.
        return ScriptedLLM(seed=seed).chat.completions.create(**kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recorded")
    town = StandIn(ScriptedLLM(seed=1))
    study = Study(TINY, out, progress=False, embedder=HashEmbedder(), _conn=town)  # type: ignore[arg-type]
    reproduce(study, steps=("collect",))
    study.close()
    return out / "data"


def _later_steps(runs: Path, out: Path, profile: Profile) -> tuple[dict[str, Any], list[Any]]:
    server = _SamplingServer()
    study = Study(
        profile,
        out,
        progress=False,
        embedder=HashEmbedder(),
        runs=runs,
        _conn=StandIn(server),  # type: ignore[arg-type]
    )
    reproduce(study, steps=("collect", *LATER))
    study.close()
    results = {name: json.loads((out / f"{name}.json").read_text()) for name in LATER}
    return results, server.seeds


def test_the_later_steps_give_the_same_results_twice(runs: Path, tmp_path: Path) -> None:
    first, seeds = _later_steps(runs, tmp_path / "first", TINY)
    second, seeds_again = _later_steps(runs, tmp_path / "second", TINY)
    assert first["quality"]["revise_calls"] > 0
    for name in LATER:
        assert first[name] == second[name], name
    # The steps asked the server (revisions and rankings), every request with a seed.
    assert seeds and None not in seeds
    assert seeds == seeds_again
    # Another profile seed is another draw: other seeds reach the server, other results.
    other, other_seeds = _later_steps(runs, tmp_path / "other", TINY.model_copy(update={"seed": 7}))
    assert set(other_seeds).isdisjoint(seeds)
    assert other != first


def test_a_request_is_seeded_by_the_step_the_request_and_its_occurrence() -> None:
    fake = FakeOpenAI(lambda request: "ok")
    client = SeededClient(fake, "0:quality")
    request = {"model": "m", "messages": [{"role": "user", "content": "rate it"}]}
    client.chat.completions.create(**request)
    client.chat.completions.create(**request)  # asked again: a resubmission, a new seed
    client.chat.completions.create(**request, seed=5)  # a seed of its own is kept
    sent = [c["seed"] for c in fake.calls]
    assert sent == [request_seed("0:quality", request, 0), request_seed("0:quality", request, 1), 5]
    assert sent[0] != sent[1]
    assert request_seed("1:quality", request, 0) != sent[0]
    assert request_seed("0:compare", request, 0) != sent[0]
    assert all(0 <= s < 2**31 for s in sent)
    assert client.base_url == fake.base_url  # everything else is the client's
