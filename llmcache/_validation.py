"""Validators: a callable that raises (or returns ``False``), or a pydantic model class.

A validator written for an existing code base rarely raises only ``ValueError``: parse
functions index into the answer and fail with ``KeyError``, ``IndexError``, ``TypeError`` or
``AttributeError``. Any ``Exception`` a validator raises therefore marks the answer invalid (it
is resubmitted like any invalid answer): one escaping raw would lose an answer already paid
for. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
``SystemExit``) is no opinion on the answer and passes through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ._errors import ConfigurationError

__all__ = ["as_validator", "check"]

CheckFn = Callable[[str], None]


def _accept(content: str) -> None:
    return None


def as_validator(validator: Any) -> CheckFn:
    """Normalise what a caller gave into ``check(content) -> None | raise``."""
    if validator is None:
        return _accept
    if isinstance(validator, type) and issubclass(validator, BaseModel):
        model: type[BaseModel] = validator

        def check_model(content: str) -> None:
            model.model_validate_json(content)

        return check_model
    if callable(validator):

        def check_callable(content: str) -> None:
            result = validator(content)
            # A validator may also answer False instead of raising.
            if result is False:
                raise ValueError("validator returned False")

        return check_callable
    raise ConfigurationError(
        f"validator must be a pydantic model class or a callable, not {type(validator).__name__}"
    )


def check(validate: CheckFn, content: str | None) -> str | None:
    """Return the reason ``content`` is invalid, or ``None`` when it is valid."""
    if content is None:
        return "the answer has no text content"
    try:
        validate(content)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        return str(exc)[:500] or type(exc).__name__
    except Exception as exc:
        # The validator's own failure on this answer (a parse function's KeyError, say): the
        # answer is invalid, named by the exception's type since its text may say little
        # (a KeyError's is only the missing key).
        return f"{type(exc).__name__}: {exc}"[:500]
    return None
