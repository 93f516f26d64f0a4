"""Placement settings load from a mapping and refuse what they cannot use."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.placement_config import PlacementConfig


def test_defaults_and_a_full_mapping() -> None:
    assert PlacementConfig.from_dict({}) == PlacementConfig()
    config = PlacementConfig.from_dict(
        {
            "scoring": {"least-allocated": 1, "gpu-model": 2, "cost": 0.5},
            "gpu_product_label": "example.com/gpu",
            "priority_classes": {"high": 100},
            "queue_limits": {"team-a": 3},
            "default_queue_limit": 10,
        }
    )
    assert [p.name for p, _ in config.scorer().policies] == ["least-allocated", "gpu-model", "cost"]
    fairness = config.fairness()
    assert fairness.priority_classes == {"high": 100}
    assert fairness.limit_of("team-a") == 3 and fairness.limit_of("other") == 10


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ({"scoring": {"cheapest": 1}}, "unknown scoring policies ['cheapest']"),
        ({"scoring": {"cost": -1}}, "scoring.cost"),
        ({"queue_limits": {"a": -2}}, "queue_limits.a"),
        ({"priority_classes": {"high": "very"}}, "priority_classes.high"),
        ({"weights": {}}, "weights"),
    ],
)
def test_bad_settings_name_the_field(data: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError) as raised:
        PlacementConfig.from_dict(data)
    assert complaint in str(raised.value)
