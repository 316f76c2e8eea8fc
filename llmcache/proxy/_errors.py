"""Errors as an OpenAI-compatible server writes them: ``{"error": {message, type, param,
code}}`` with the HTTP status that goes with them, so that every client library that reads
OpenAI's errors reads the proxy's."""

from __future__ import annotations

import json

from starlette.responses import Response

from ..errors import LLMCacheError

__all__ = ["RequestError", "error_body", "error_response"]


class RequestError(LLMCacheError):
    """A request the proxy answers with an error of its own (never the upstream's)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def response(self) -> Response:
        return error_response(
            self.status, self.message, type=self.type, param=self.param, code=self.code
        )


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    error = {"message": message, "type": type, "param": param, "code": code}
    return json.dumps({"error": error}, ensure_ascii=False).encode()


def error_response(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = error_body(message, type=type, param=param, code=code)
    return Response(body, status_code=status, media_type="application/json", headers=headers)
