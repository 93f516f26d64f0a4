"""Pick the bus a process talks through: Kafka when a bootstrap is configured."""

from __future__ import annotations

from bus.base import Bus
from bus.kafka import KafkaBus
from bus.memory import MemoryBus
from bus.runtimes import read_runtimes
from schemas.trainer_runtimes import RuntimeCatalog
from trainhub.settings import TrainhubSettings


def make_bus(settings: TrainhubSettings, *, allow_memory: bool = False) -> Bus:
    if settings.bootstrap:
        return KafkaBus(settings.kafka())
    if allow_memory:
        return MemoryBus()
    settings.kafka()  # raises the clear "no bootstrap" error
    raise AssertionError("unreachable")


async def bus_runtimes(settings: TrainhubSettings) -> RuntimeCatalog:
    """This process's TrainJob runtimes with those applied on the bus (read to its end now)."""
    bus = make_bus(settings)
    await bus.start()
    try:
        return await read_runtimes(bus, settings.topics())
    finally:
        await bus.close()
