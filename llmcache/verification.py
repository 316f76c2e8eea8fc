"""Telling right answers from wrong ones: validators (is an answer valid for its query),
equivalences (do a cached and a fresh answer agree: the wrong-hit budget's labels) and
verifiers (would one answer serve two requests: re-scoring near misses), and the opposites
gate (does a near candidate's text mean the opposite of the query's)."""

from __future__ import annotations

from ._equivalence import Within, equivalence_name, equivalence_named, same_answer
from ._llm_verifier import LLMVerifier
from ._opposites import Opposition, opposition
from ._protocols import Equivalence, Validator, Verifier

__all__ = [
    "Equivalence",
    "LLMVerifier",
    "Opposition",
    "Validator",
    "Verifier",
    "Within",
    "equivalence_name",
    "equivalence_named",
    "opposition",
    "same_answer",
]
