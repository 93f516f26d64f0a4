"""One adapter per Kubeflow kind, registered in one table; the worker never branches on kind."""

from __future__ import annotations

from workers.frameworks.base import FrameworkAdapter
from workers.frameworks.jax import JAXAdapter

ADAPTERS: dict[str, FrameworkAdapter] = {a.kind: a for a in (JAXAdapter(),)}


class UnsupportedKind(ValueError):
    pass


def adapter_for(kind: str) -> FrameworkAdapter:
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise UnsupportedKind(
            f"no worker adapter for kind {kind!r}; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None
