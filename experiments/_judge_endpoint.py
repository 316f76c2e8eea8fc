"""Where the study's LLM judge is asked: any OpenAI-compatible endpoint, model and key.

``python -m experiments ... --judge-base-url URL --judge-model NAME`` points every LLM judge
(the rankings and the pairwise judge) at that server; the key comes only from the environment
(``LLMCACHE_JUDGE_API_KEY``, else ``OPENAI_API_KEY``), is held in memory by the client and is
never written: :class:`JudgeEndpoint`'s repr leaves it out, its :attr:`~JudgeEndpoint.description`
(what results and reports name) holds the model and the server's address only, and
:func:`redact_argv` strips what a URL could carry (user info, query) from the command line
the study records.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import openai

__all__ = ["JUDGE_KEY_ENV", "JudgeEndpoint", "redact_argv", "redact_url"]

#: Environment variables the judge's key is read from, first set wins.
JUDGE_KEY_ENV = ("LLMCACHE_JUDGE_API_KEY", "OPENAI_API_KEY")

# A local OpenAI-compatible server ignores the key, but the client insists on one.
_NO_KEY = "no-key"


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment: the parts that can carry a secret."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact_argv(argv: Sequence[str], option: str = "--judge-base-url") -> list[str]:
    """``argv`` with the value of ``option`` (``--opt VALUE`` or ``--opt=VALUE``) redacted."""
    out: list[str] = []
    take = False
    for arg in argv:
        if take:
            out.append(redact_url(arg))
            take = False
        elif arg == option:
            out.append(arg)
            take = True
        elif arg.startswith(option + "="):
            out.append(f"{option}={redact_url(arg.split('=', 1)[1])}")
        else:
            out.append(arg)
    return out


@dataclass(frozen=True, repr=False)
class JudgeEndpoint:
    """The judge's model and, optionally, its own OpenAI-compatible server.

    Without ``base_url`` the judge asks ``model`` on the study's own LLM connection.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("the judge's model must be named")

    def __repr__(self) -> str:
        url = None if self.base_url is None else redact_url(self.base_url)
        return f"JudgeEndpoint(model={self.model!r}, base_url={url!r})"

    @classmethod
    def from_env(
        cls, model: str, base_url: str | None = None, environ: Mapping[str, str] | None = None
    ) -> JudgeEndpoint:
        """The endpoint with its key from the environment (:data:`JUDGE_KEY_ENV`)."""
        env = os.environ if environ is None else environ
        key = next((env[name] for name in JUDGE_KEY_ENV if env.get(name)), None)
        return cls(model=model, base_url=base_url, api_key=key)

    @property
    def description(self) -> str:
        """What the study's files may say about the judge: model and server, never the key."""
        if self.base_url is None:
            return self.model
        return f"{self.model} at {redact_url(self.base_url)}"

    def client(self) -> openai.OpenAI:
        """A client of ``base_url`` (a caller without one uses its own connection)."""
        if self.base_url is None:
            raise ValueError("this judge endpoint has no base_url: use the study's client")
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key or _NO_KEY)
