"""Resource amounts as placement computes with them: an int where the quantity is whole.

Quantities arrive as Decimals (exact, as Kubernetes means them), but most are whole numbers
(cores, bytes, pods, GPUs), and placement adds, subtracts and compares them for every node
it looks at. Decimal arithmetic fetches its context and allocates on every operation; an
int's is a few instructions. Python compares and combines int and Decimal exactly (and
`Decimal(2) == 2`, with equal hashes), so a fractional amount simply stays a Decimal and
every result is what all-Decimal arithmetic gave, short of its 28-digit rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

Amount = int | Decimal
"""A resource amount in its base unit (cores, bytes, pods...)."""


def compact(amount: Amount) -> Amount:
    """The same amount, as an int where it is whole."""
    if isinstance(amount, int) or not amount.is_finite():
        return amount
    numerator, denominator = amount.as_integer_ratio()  # one call: cheaper than int() and ==
    return numerator if denominator == 1 else amount


def compact_all(amounts: Mapping[str, Amount]) -> dict[str, Amount]:
    return {resource: compact(amount) for resource, amount in amounts.items()}
