"""Placement computes with whole amounts as ints: the same results as all-Decimal arithmetic."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.amounts import compact, compact_all
from dispatcher.demand import PodDemand
from dispatcher.gang_fit import NodeRoom, gang_fit, pod_slots
from schemas.quantity import format_quantity

# Amounts as quantities give them: whole cores and bytes, milli-cores, odd fractions, huge.
amounts = st.one_of(
    st.integers(0, 2**40).map(Decimal),
    st.integers(0, 200_000).map(lambda m: Decimal(m) / 1000),
    st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False, allow_infinity=False),
    st.integers(2**62, 2**63).map(Decimal),
)


def test_whole_amounts_become_ints_and_the_rest_stay_decimals() -> None:
    assert compact(Decimal("8")) == 8 and type(compact(Decimal("8"))) is int
    assert type(compact(Decimal("8.000"))) is int
    assert type(compact(Decimal("8589934592"))) is int  # 8Gi
    half = compact(Decimal("0.5"))
    assert type(half) is Decimal and half == Decimal("0.5")
    assert type(compact(Decimal("Infinity"))) is Decimal
    assert compact(7) == 7
    assert compact_all({"cpu": Decimal("2"), "memory": Decimal("1.5")}) == {
        "cpu": 2,
        "memory": Decimal("1.5"),
    }
    assert format_quantity(compact(Decimal(8 * 2**30))) == "8Gi"


@settings(max_examples=300, deadline=None)
@given(amounts, amounts)
def test_arithmetic_on_compact_amounts_is_decimal_arithmetic(a: Decimal, b: Decimal) -> None:
    x, y = compact(a), compact(b)
    assert x == a and hash(x) == hash(a)
    assert (x - y) == (a - b) and (x + y) == (a + b) and (x * 3) == (a * 3)
    assert (x < y) == (a < b) and (x <= y) == (a <= b) and (x - y < 0) == (a - b < 0)
    if b:  # placement never divides by a zero request (`positive_needs` leave them out)
        assert pod_slots({"r": x}, (("r", y),)) == pod_slots({"r": a}, (("r", b),))


@settings(max_examples=150, deadline=None)
@given(
    frees=st.lists(st.tuples(amounts, amounts), min_size=1, max_size=6),
    pods=st.lists(st.tuples(st.integers(1, 4), amounts, amounts), min_size=1, max_size=3),
)
def test_a_gang_packs_the_same_on_compact_and_on_decimal_amounts(
    frees: list[tuple[Decimal, Decimal]], pods: list[tuple[int, Decimal, Decimal]]
) -> None:
    demands = [
        PodDemand(f"T{i}", count, {"cpu": cpu, "memory": memory})
        for i, (count, cpu, memory) in enumerate(pods)
    ]
    as_decimals = [
        NodeRoom(f"n{i}", {"cpu": cpu, "memory": memory}) for i, (cpu, memory) in enumerate(frees)
    ]
    compacted = [NodeRoom(room.name, compact_all(room.free)) for room in as_decimals]
    decimal_fit, compact_fit = gang_fit(as_decimals, demands), gang_fit(compacted, demands)
    assert compact_fit.fits == decimal_fit.fits
    assert compact_fit.usage == decimal_fit.usage
    assert compact_fit.reason == decimal_fit.reason
