"""The code site a call without options comes from (``llmcache/_site.py``): read from the
stack, named by ``code_site``, and what it keeps apart in the template learner."""

from __future__ import annotations

import inspect
import random
from collections import Counter, defaultdict
from pathlib import Path

from llmcache import CachedLLM, SemanticCache
from llmcache._site import carried_by, current_site
from llmcache.replay import ReplayCall, ReplayReport, read_recording, replay
from llmcache.templates import TemplateLearner, code_site
from llmcache.testing import FakeOpenAI, HashEmbedder

OBSERVATIONS = [
    f"{who} {verb} the {thing} {where}."
    for who in ("Tommie", "Eve", "A dog", "The neighbour")
    for verb in ("sees", "fixes", "drops", "paints", "carries")
    for thing in ("chair", "kettle", "letter", "bicycle")
    for where in ("in the kitchen", "outside the window", "at the job fair")
]


def _here() -> tuple[str | None, int]:
    """The site read here, and the line it was read at."""
    return current_site(), inspect.currentframe().f_lineno  # type: ignore[union-attr]


def test_a_call_s_site_is_the_innermost_frame_outside_the_carrying_packages() -> None:
    site, line = _here()
    assert site is not None
    module, function, at = site.split(":")
    assert module.endswith("test_site") and function == "_here" and int(at) == line


def test_a_named_site_holds_inside_and_the_stack_again_after() -> None:
    with code_site("outer"):
        assert current_site() == "outer"
        with code_site("inner"):
            assert current_site() == "inner"
        assert current_site() == "outer"
    site = current_site()
    assert site is not None and site.split(":")[1].startswith("test_a_named_site")


class _Cache:
    """Stands for a user's subclass of the cache, defined outside llmcache: its method carries
    the call, and is not the call's site."""

    def lookup(self) -> str | None:
        with carried_by(self):
            return current_site()


def _caller_of_the_cache(cache: _Cache) -> tuple[str | None, int]:
    return cache.lookup(), inspect.currentframe().f_lineno  # type: ignore[union-attr]


def test_a_method_of_the_carrying_object_is_never_the_site() -> None:
    site, line = _caller_of_the_cache(_Cache())
    assert site is not None and site.endswith(f":_caller_of_the_cache:{line}")
    # Without the carrier named, its method would have been taken for the site.
    assert (_Cache.lookup.__code__.co_name in (current_site() or "")) is False


def _entity(observation: str) -> str:
    return f"What is the observed entity in the following observation? {observation}\nEntity="


def _action(entity: str, observation: str) -> str:
    return (
        f"What is the {entity} doing in the following observation? {observation}\nThe {entity} is"
    )


def _chain(
    learner: TemplateLearner, rng: random.Random, apart: bool
) -> dict[str, Counter[str | None]]:
    """A chain's two calls about each observation, the second quoting the first's answer:
    with ``apart`` each from its own function (two sites read from the stack), else both from
    one (one site, as through the proxy). Per call kind, the templates it was filed under."""

    def ask_entity(prompt: str) -> str | None:
        options = learner.options(prompt)
        return options.template if options is not None else None

    def ask_action(prompt: str) -> str | None:
        options = learner.options(prompt)
        return options.template if options is not None else None

    filed: dict[str, Counter[str | None]] = defaultdict(Counter)
    for observation in rng.sample(OBSERVATIONS, 120):
        entity = observation.split(" ")[0] if rng.random() < 0.7 else "the thing"
        filed["entity"][ask_entity(_entity(observation))] += 1
        ask = ask_action if apart else ask_entity
        filed["action"][ask(_action(entity, observation))] += 1
    return filed


def test_two_templates_of_a_chain_that_share_their_values_are_learned_apart_by_site() -> None:
    """An entity question and an action question about the same observation, one after the
    other: as text they share the observation, so it looks fixed and the questions like
    values. Learned per code site, each is its own template: most calls filed, never under
    the other's template."""
    filed = _chain(TemplateLearner(), random.Random(7), apart=True)
    entity = {t for t in filed["entity"] if t is not None}
    action = {t for t in filed["action"] if t is not None}
    assert entity and action and not entity & action
    for kind in ("entity", "action"):
        assert filed[kind][None] <= 40, (kind, filed[kind])  # of 120 calls
    # From one code site (one function asks both: there one line of code builds one
    # template) they are taken for one template whose question is a slot: what the sites are
    # for (the next test: still never a wrong answer). By the text alone they are learned
    # apart (test_learn: a chain's two questions about one value).
    one = _chain(TemplateLearner(), random.Random(7), apart=False)
    assert {t for t in one["entity"] if t} & {t for t in one["action"] if t}


def test_from_one_site_the_two_questions_share_a_table_but_never_an_answer(
    echo_learner: tuple[CachedLLM, FakeOpenAI],
) -> None:
    """From one code site (this test's line asks both) the two questions are one template,
    the question words a slot. In the table the two share, that slot has few values, each
    recurring: it says which call it is and must match exactly (llmcache/_slots.py), so an
    entity question is never served an action question's answer, however alike their
    observations."""
    client, fake = echo_learner
    rng = random.Random(7)
    served = 0
    for _ in range(2):  # the second round repeats the first's questions: hits
        for observation in rng.sample(OBSERVATIONS, 120):
            entity = observation.split(" ")[0] if rng.random() < 0.7 else "the thing"
            for prompt in (_entity(observation), _action(entity, observation)):
                asked = len(fake.calls)
                answer = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": prompt}]
                )
                text = str(answer.choices[0].message.content)
                if len(fake.calls) == asked:  # served from the cache
                    served += 1
                    # A near hit may carry another observation's answer; never the other
                    # question's (the other prompt's opening words).
                    assert text.split("?")[0] == ("ANSWER " + prompt).split("?")[0], (
                        prompt,
                        text,
                    )
    assert served > 0


def test_a_template_learned_at_a_site_says_where() -> None:
    learner = TemplateLearner()
    with code_site("importance"):
        for observation in OBSERVATIONS[:40]:
            learner.options(f"Rate how poignant this memory is, 1 to 10.\nMemory: {observation}")
    (learned,) = learner.templates()
    assert learned.site == "importance"


def test_a_kept_template_keeps_its_site_and_an_exported_one_says_it(tmp_path: Path) -> None:
    path = tmp_path / "learned.json"
    learner = TemplateLearner(path=path)
    with code_site("importance"):
        for observation in OBSERVATIONS[:40]:
            learner.options(f"Rate how poignant this memory is, 1 to 10.\nMemory: {observation}")
    (kept,) = TemplateLearner(path=path).templates()
    assert kept.site == "importance"
    (written,) = learner.export(tmp_path / "prompts")
    assert "at importance." in written.read_text(encoding="utf-8")


def _chain_calls(sites: bool) -> list[ReplayCall]:
    """The chain's calls as a recording holds them: each with its answer, and with its code
    site where the recording kept one."""
    rng = random.Random(7)
    calls = []
    for observation in rng.sample(OBSERVATIONS, 120):
        entity = observation.split(" ")[0] if rng.random() < 0.7 else "the thing"
        for kind, prompt in (
            ("entity", _entity(observation)),
            ("action", _action(entity, observation)),
        ):
            calls.append(
                ReplayCall(
                    category=kind,
                    messages=[{"role": "user", "content": prompt}],
                    answer=f"{kind} of {observation}",
                    site=kind if sites else None,
                )
            )
    return calls


def test_a_recording_keeps_each_learned_call_s_site_and_a_replay_learns_under_it(
    tmp_path: Path,
) -> None:
    """A call filed under a learned template carries its code site (its options' metadata);
    the recorder writes it, a recording read back gives it to each call, and a replay that
    learns templates learns each site apart, as the live client did."""
    fake = FakeOpenAI(lambda request: "ANSWER " + str(request["messages"][-1]["content"]))
    client = CachedLLM(
        fake,
        cache=SemanticCache(tmp_path / "c", embedder=HashEmbedder(dim=64)),
        recorder=tmp_path / "rec.jsonl",
        learn_templates=True,
    )
    for call in _chain_calls(sites=True):
        with code_site(call.category):
            client.chat.completions.create(model="m", messages=call.messages)
    client.close()
    recorded = read_recording(tmp_path / "rec.jsonl").calls
    assert recorded and {c.site for c in recorded} == {"entity", "action"}
    assert all(c.site == ("entity" if "observed entity" in str(c.messages) else "action")
               for c in recorded)  # fmt: skip
    # Replayed as code that declares nothing: by site, most calls filed, each question under
    # its own template; the same calls without their sites, by the text alone.
    embedder = HashEmbedder(dim=64)
    by_site = replay(_chain_calls(sites=True), embedder=embedder, learn_templates=True)
    alone = replay(_chain_calls(sites=False), embedder=embedder, learn_templates=True)
    filed = {
        name: Counter(r.category for r in report.results if r.filed_under is not None)
        for name, report in (("site", by_site), ("alone", alone))
    }

    def both(report: ReplayReport) -> set[str | None]:
        """The templates that filed calls of both questions."""
        under = {
            kind: {r.filed_under for r in report.results if r.category == kind}
            for kind in ("entity", "action")
        }
        return (under["entity"] & under["action"]) - {None}

    assert filed["site"]["entity"] >= 80 and filed["site"]["action"] >= 80, filed
    assert not both(by_site)
    # By the text alone too: the entity question is kept as a seed once the action question
    # joined it, and the two learned templates, whose ends differ, are never made one.
    assert filed["alone"]["entity"] >= 80 and filed["alone"]["action"] >= 80, filed
    assert not both(alone), filed
