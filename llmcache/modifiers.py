"""How a cached answer becomes the answer to a new query: read it, choose the query's option,
or revise it with the LLM; and the hit step that runs the modifier and validates its result."""

from __future__ import annotations

from ._hit import HitStep
from ._modifiers import Choose, Read, Revise
from ._protocols import Modifier, ModifyContext

__all__ = ["Choose", "HitStep", "Modifier", "ModifyContext", "Read", "Revise"]
