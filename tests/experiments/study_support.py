"""What the study's tests share: a stand-in for the study's LLM connection."""

from __future__ import annotations

from typing import Any

from llmcache.llm import LLMBackend, LLMKind


class StandIn:
    """The study's connection (``Study(_conn=...)``) on a scripted ``client``: a URL backend
    named ``scripted``, whose superior model is ``scripted-superior``."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.backend = LLMBackend(
            kind=LLMKind.URL,
            model="scripted",
            superior_model="scripted-superior",
            base_url="http://scripted.invalid/v1",
        )

    def close(self) -> None:
        pass
