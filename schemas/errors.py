"""Errors of the contract layer, worded for the person who sent the bad input."""

from __future__ import annotations

from pydantic import ValidationError


class ContractError(ValueError):
    """Input that does not satisfy the contract; the message names field and value."""


class JobInvalid(ContractError):
    """A job document that cannot be accepted."""


class EventDecodeError(ContractError):
    """A bus record that is not a well-formed trainhub CloudEvent."""


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem: `field.path: message (got <value>)`."""
    lines = []
    for err in exc.errors(include_url=False):
        path = ".".join(str(p) for p in err["loc"])
        path = prefix + path if path else (prefix.rstrip(".") or "document")
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] in {"missing"}:
            lines.append(f"{path}: field required")
        elif "(got " in message:  # our own checks name the value they refuse
            lines.append(f"{path}: {message}")
        else:
            lines.append(f"{path}: {message} (got {_short(err.get('input'))})")
    return "; ".join(lines)
