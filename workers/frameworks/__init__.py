"""One adapter per Kubeflow kind, registered in one table; the worker never branches on kind."""

from __future__ import annotations

from workers.frameworks.base import FrameworkAdapter
from workers.frameworks.jax import JAXAdapter
from workers.frameworks.mpi import MPIAdapter
from workers.frameworks.paddle import PaddleAdapter
from workers.frameworks.pytorch import PyTorchAdapter
from workers.frameworks.tensorflow import TFAdapter
from workers.frameworks.trainjob import TrainJobAdapter
from workers.frameworks.xgboost import XGBoostAdapter

ADAPTERS: dict[str, FrameworkAdapter] = {
    a.kind: a
    for a in (
        TFAdapter(),
        PyTorchAdapter(),
        XGBoostAdapter(),
        MPIAdapter(),
        PaddleAdapter(),
        JAXAdapter(),
        TrainJobAdapter(),
    )
}


class UnsupportedKind(ValueError):
    pass


def adapter_for(kind: str) -> FrameworkAdapter:
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise UnsupportedKind(
            f"no worker adapter for kind {kind!r}; supported: {', '.join(sorted(ADAPTERS))}"
        ) from None
