"""Kubernetes resource quantities (`500m`, `32Gi`, `4`) parsed into exact decimals."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|(?P<exp>[eE][+-]?\d+))?$"
)
# Quantities above this are certainly typos or attacks; Kubernetes caps at 2^63 too.
_MAX = Decimal(2) ** 63


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: Any) -> Decimal:
    """Parse `500m`, `2Gi`, `1e3`, `4` or a number into an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, int | float | Decimal):
        number = Decimal(str(value))
    else:
        raise QuantityError(f"not a quantity: {value!r}")
    return _in_range(number, value)


@functools.lru_cache(maxsize=4096)  # job templates repeat a handful of quantities endlessly
def _parse_text(value: str) -> Decimal:
    match = _PATTERN.match(value.strip())
    if not match:
        raise QuantityError(f"not a quantity: {value[:64]!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"not a quantity: {value[:64]!r}") from exc
    if match["exp"]:
        number = number.scaleb(int(match["exp"][1:]))
    else:
        number *= _SUFFIXES[match["suffix"] or ""]
    return _in_range(number, value)


def _in_range(number: Decimal, value: Any) -> Decimal:
    if not number.is_finite() or abs(number) > _MAX:
        raise QuantityError(f"quantity out of range: {value!r}")
    return number


def format_quantity(value: Decimal | int) -> str:
    """Render an amount back in Kubernetes notation (milli-units or binary suffixes)."""
    if isinstance(value, int):
        value = Decimal(value)
    if value == value.to_integral_value():
        whole = int(value)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIXES[suffix])
            if whole and whole % unit == 0 and abs(whole) >= unit:
                return f"{whole // unit}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")


def _validate(value: Any) -> Decimal:
    number = parse_quantity(value)
    if number < 0:
        raise QuantityError(f"quantity must not be negative: {value!r}")
    return number


Quantity = Annotated[Decimal, BeforeValidator(_validate), PlainSerializer(format_quantity)]
"""A non-negative quantity: parsed on input, written back in Kubernetes notation."""

_RESOURCE_NAME = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _resource_name(value: Any) -> str:
    """A resource name as the apiserver takes it: a qualified name (`cpu`, `nvidia.com/gpu`)."""
    if not isinstance(value, str):
        raise ValueError(f"a resource name is a string (got {value!r})")
    name = value.rpartition("/")[2]
    if len(value) > 316 or len(name) > 63 or not _RESOURCE_NAME.match(value):
        raise ValueError(
            f"not a resource name: {value[:80]!r} (a qualified name such as cpu, memory or "
            "nvidia.com/gpu)"
        )
    return value


ResourceName = Annotated[str, BeforeValidator(_resource_name)]

ResourceList = dict[ResourceName, Quantity]
