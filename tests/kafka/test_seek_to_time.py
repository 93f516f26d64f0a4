"""`seek_to_time` on a real broker while records keep arriving (what `submit --watch` does)."""

from __future__ import annotations

from typing import Any

import pytest

from bus.base import TopicSpec
from bus.kafka import KafkaBus, KafkaSubscription
from bus.topics import Topics

pytestmark = pytest.mark.kafka


async def test_a_record_written_while_seeking_by_time_is_not_skipped(
    bus: KafkaBus, topics: Topics
) -> None:
    topic = topics.status
    await bus.create_topics([TopicSpec(topic, partitions=1)])
    subscription = bus.subscribe([topic], group=None)
    assert isinstance(subscription, KafkaSubscription)
    await subscription.start()
    try:
        consumer = subscription._consumer
        assert consumer is not None
        look_up = consumer.offsets_for_times

        async def then_a_record_arrives(*args: Any, **kwargs: Any) -> Any:
            # The topic is empty when asked, so no offset is found; the record lands just
            # after the answer, before the consumer has moved.
            found = await look_up(*args, **kwargs)
            await bus.publish(topic, b"arrived-while-seeking", key=b"k")
            return found

        consumer.offsets_for_times = then_a_record_arrives
        await subscription.seek_to_time(0)
        values = [record.value for record in await subscription.poll(timeout=5.0)]
        assert values == [b"arrived-while-seeking"]
    finally:
        await subscription.stop()
