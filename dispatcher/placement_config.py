"""Placement settings in one place: scoring weights, GPU labels, priorities and queue limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from dispatcher.fairness import FairnessConfig
from dispatcher.scoring import (
    DEFAULT_GPU_PRODUCT_LABEL,
    DEFAULT_GPU_RESOURCE,
    ScoringOptions,
    WeightedScorer,
)
from schemas.errors import describe_validation_error

NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Limit = Annotated[int, Field(ge=0)]


@dataclass
class PlacementConfig:
    """Example YAML (the keys of `from_dict`):

    ```yaml
    scoring: {least-allocated: 1, gpu-model: 2, cluster-affinity: 1, cost: 0.5}
    gpu_product_label: nvidia.com/gpu.product
    priority_classes: {high: 100, low: -10}
    queue_limits: {team-a: 20}
    default_queue_limit: 50
    ```
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    scoring: dict[str, NonNegative] = field(default_factory=lambda: {"least-allocated": 1.0})
    """Scoring policy name -> weight (see dispatcher/scoring.py for the names)."""
    gpu_product_label: str = DEFAULT_GPU_PRODUCT_LABEL
    """The node label naming the GPU product, for the gpu-model policy."""
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    """The extended resource counting GPUs, for the gpu-model policy."""
    priority_classes: dict[str, int] = field(default_factory=dict)
    """schedulingPolicy.priorityClass -> number; higher is placed first."""
    default_priority: int = 0
    default_queue: str = "default"
    queue_limits: dict[str, Limit] = field(default_factory=dict)
    """schedulingPolicy.queue -> most jobs in flight at once."""
    default_queue_limit: Limit | None = None
    """Limit of the queues not in `queue_limits`; None is unlimited."""

    def __post_init__(self) -> None:
        self.scorer()  # unknown policy names fail here, at startup

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PlacementConfig:
        """Validate a settings mapping; ValueError names the field and the offending value."""
        try:
            return _ADAPTER.validate_python(dict(data or {}))
        except ValidationError as exc:
            raise ValueError(f"placement settings: {describe_validation_error(exc)}") from exc

    def scorer(self) -> WeightedScorer:
        options = ScoringOptions(
            gpu_product_label=self.gpu_product_label, gpu_resource=self.gpu_resource
        )
        return WeightedScorer.from_weights(self.scoring, options)

    def fairness(self) -> FairnessConfig:
        return FairnessConfig(
            priority_classes=dict(self.priority_classes),
            default_priority=self.default_priority,
            default_queue=self.default_queue,
            queue_limits=dict(self.queue_limits),
            default_queue_limit=self.default_queue_limit,
        )


_ADAPTER = TypeAdapter(PlacementConfig)
