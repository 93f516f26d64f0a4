"""Errors of the contract layer, worded for the person who sent the bad input."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError
from pydantic_core import ErrorDetails


class ContractError(ValueError):
    """Input that does not satisfy the contract; the message names field and value."""


class JobInvalid(ContractError):
    """A job document that cannot be accepted."""


class EventDecodeError(ContractError):
    """A bus record that is not a well-formed trainhub CloudEvent."""


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(
    exc: ValidationError,
    prefix: str = "",
    hint: Callable[[ErrorDetails], str | None] | None = None,
) -> str:
    """One line per problem: `field.path: message (got <value>)`, and `hint`'s guess at
    what was meant, where it has one."""
    lines = []
    for err in exc.errors(include_url=False):
        line = _line(err, prefix)
        said = hint(err) if hint is not None else None
        lines.append(line if said is None else f"{line}: {said}")
    return "; ".join(lines)


def _line(err: ErrorDetails, prefix: str) -> str:
    path = ".".join(str(p) for p in err["loc"])
    path = prefix + path if path else (prefix.rstrip(".") or "document")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] in {"missing"}:
        return f"{path}: field required"
    if "(got " in message:  # our own checks name the value they refuse
        return f"{path}: {message}"
    return f"{path}: {message} (got {_short(err.get('input'))})"
