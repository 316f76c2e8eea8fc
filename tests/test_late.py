"""Answers paid for while their template was learned, filed once it is (llmcache/_late.py):
what is kept, for how long, and what is handed back to be filed."""

from __future__ import annotations

from llmcache._late import LateFiling
from llmcache.templates import TemplateLearner, code_site

QUESTION = (
    "On the scale of 1 to 10, rate how poignant this memory is for {agent}.\nMemory: {memory}"
)
MEMORIES = [f"memory number {i} of the day, told in its own words {i * 7}" for i in range(40)]


def _prompt(i: int) -> tuple[str, None]:
    return QUESTION.format(agent=("Ann", "Bob")[i % 2], memory=MEMORIES[i]), None


def test_only_the_calls_the_learner_handled_are_kept_and_only_with_their_own_answers() -> None:
    late: LateFiling[str] = LateFiling(limit=4)
    late.answered(("never expected", None), "an answer")  # not the learner's: dropped
    late.expect(("passed", None), site=None)
    late.answered(("passed", None), "a hit's answer", fresh=False)  # another prompt's answer
    late.answered(("passed", None), "too late")  # the expectation was used up
    learner = TemplateLearner()
    learner.learned = 1  # as if a template had been learned since
    assert late.ready(learner) is False  # nothing kept
    assert late.due(learner) == []


def test_the_answers_a_learned_template_files_are_handed_back_once_and_kept_bounded() -> None:
    learner = TemplateLearner()
    late: LateFiling[int] = LateFiling(limit=8)
    with code_site("the rating code"):
        for i in range(30):
            prompt = _prompt(i)
            if learner.options(*prompt) is None:
                late.expect(prompt, site="the rating code")
            late.answered(prompt, i)
            if late.ready(learner):
                break
    assert learner.learned == 1
    due = late.due(learner)
    # The latest 8 kept (the bound), each filed under the template learned, once.
    assert [answer for answer, _ in due] == list(range(i - 7, i + 1))
    assert {options.category for _, options in due} == {learner.templates()[0].name}
    assert all(options.metadata == {"site": "the rating code"} for _, options in due)
    assert late.ready(learner) is False and late.due(learner) == []
    # Expectations are bounded too: the oldest awaited prompt is forgotten.
    for k in range(9):
        late.expect((f"awaited {k}", None), site=None)
    late.answered(("awaited 0", None), -1)
    learner.learned += 1
    assert all(answer != -1 for answer, _ in late.due(learner))
