"""Telling right answers from wrong ones: validators (is an answer valid for its query),
equivalences (do a cached and a fresh answer agree: the wrong-hit budget's labels) and
verifiers (would one answer serve two requests: re-scoring near misses)."""

from __future__ import annotations

from ._equivalence import Within, equivalence_name, equivalence_named, same_answer
from ._llm_verifier import LLMVerifier
from ._protocols import Equivalence, Validator, Verifier

__all__ = [
    "Equivalence",
    "LLMVerifier",
    "Validator",
    "Verifier",
    "Within",
    "equivalence_name",
    "equivalence_named",
    "same_answer",
]
