"""A YAML loader that refuses alias bombs: what a document's aliases expand to is bounded
before any object is built, so that no later step (validation, JSON encoding) sees it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_N = TypeVar("_N", bound=Node)

MAX_ALIAS_EXPANSION = 1_000_000
"""Values and characters that one document's aliases may stand for, all uses counted. A real
job shares a few container specs (kilobytes); a billion-laughs document is a kilobyte that
stands for gigabytes, and a message that large is past Kafka's default limit (1 MB) anyway."""


class AliasBomb(yaml.YAMLError):
    """A document's aliases expand beyond MAX_ALIAS_EXPANSION."""


class BoundedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that counts, as the document is composed, the size of every node an
    alias repeats (a node's size: 1, plus its characters or its children's sizes) and stops
    at MAX_ALIAS_EXPANSION. Sizes are kept per node, so the count is linear in the text."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}
        self._expanded = 0
        self._open: set[str] = set()

    def compose_document(self) -> Node | None:
        self._sizes = {}
        self._expanded = 0
        node: Node | None = super().compose_document()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event: yaml.AliasEvent = self.peek_event()  # type: ignore[no-untyped-call]
            if event.anchor in self._open:  # JSON (and so the bus) cannot carry a cycle
                raise AliasBomb(
                    f"alias *{event.anchor} inside its own anchor, at {event.start_mark}"
                )
            anchored = self.anchors.get(event.anchor)
            if anchored is not None:  # else PyYAML names the undefined alias itself
                self._expanded += self._size(anchored)
                if self._expanded > MAX_ALIAS_EXPANSION:
                    raise AliasBomb(
                        f"aliases expand to more than {MAX_ALIAS_EXPANSION} values and "
                        f"characters (a YAML alias bomb?), at {event.start_mark}"
                    )
        node: Node | None = super().compose_node(parent, index)
        return node

    def compose_sequence_node(self, anchor: Any) -> SequenceNode:
        return self._composing(anchor, super().compose_sequence_node)

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        return self._composing(anchor, super().compose_mapping_node)

    def _composing(self, anchor: Any, compose: Callable[[Any], _N]) -> _N:
        # PyYAML's stubs type `anchor` as a dict; it is the anchor's name, or None.
        if anchor is None:
            return compose(anchor)
        self._open.add(anchor)
        try:
            return compose(anchor)
        finally:
            self._open.discard(anchor)

    def _size(self, node: Node) -> int:
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        size = 1
        if isinstance(node, ScalarNode):
            size += len(node.value)
        elif isinstance(node, SequenceNode):
            size += sum(self._size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._size(k) + self._size(v) for k, v in node.value)
        self._sizes[id(node)] = size
        return size


def load_all_bounded(stream: Any) -> list[Any]:
    """Every document of a YAML stream, as yaml.safe_load_all gives them; AliasBomb (a
    YAMLError) where one document's aliases expand beyond MAX_ALIAS_EXPANSION."""
    return list(yaml.load_all(stream, Loader=BoundedSafeLoader))
