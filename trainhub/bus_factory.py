"""Pick the bus a process talks through: Kafka when a bootstrap is configured."""

from __future__ import annotations

from bus.base import Bus
from bus.kafka import KafkaBus
from bus.memory import MemoryBus
from trainhub.settings import TrainhubSettings


def make_bus(settings: TrainhubSettings, *, allow_memory: bool = False) -> Bus:
    if settings.bootstrap:
        return KafkaBus(settings.kafka())
    if allow_memory:
        return MemoryBus()
    settings.kafka()  # raises the clear "no bootstrap" error
    raise AssertionError("unreachable")
