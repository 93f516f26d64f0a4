# mypy: disable-error-code="no-untyped-call"
"""Data-parallel (SPMD) MNIST training with multi-process JAX on CPU.

Run as N separate OS processes, configured exactly like the Kubeflow Training
Operator configures the pods of a ``JAXJob``:

* ``COORDINATOR_ADDRESS``  host of process 0 (``host`` or ``host:port``)
* ``COORDINATOR_PORT``     coordinator port (ignored if the address has a port)
* ``NUM_PROCESSES``        total number of processes (default 1)
* ``PROCESS_ID``           rank of this process, ``0 .. NUM_PROCESSES-1``

Every process owns one CPU device; together they form a 1-D mesh ``("data",)``.
Each global batch is split across the processes, each process computes the
gradient of its shard and the gradients are averaged with ``lax.pmean``, an
all-reduce carried out by gloo over TCP between the processes, so that all
replicas keep identical parameters.

Data: MNIST IDX files from ``--data-dir`` / ``$DATA_DIR`` when given, otherwise
scikit-learn's bundled 8x8 digits (no download). Prints per-epoch losses and a
final ``test_accuracy=0.xxxx`` line; exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

Params = dict[str, jax.Array]
OptState = tuple[Params, Params, jax.Array]  # Adam: first moment, second moment, step
DEFAULT_PORT = 6666


@dataclass(frozen=True)
class Dataset:
    """A train/test split of flattened images scaled to [0, 1]."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int = 10


@dataclass(frozen=True)
class Cluster:
    """Where this process sits in the job (from the JAXJob environment)."""

    coordinator: str  # "host:port"
    num_processes: int
    process_id: int


# --------------------------------------------------------------------------- setup


def coordinator_address(addr: str, port: str) -> str:
    """``host:port`` for jax; ``addr`` may already carry a port (or be an IPv6 literal)."""
    if addr.startswith("["):  # [v6] or [v6]:port
        return addr if "]:" in addr else f"{addr}:{port}"
    if addr.count(":") == 1:  # host:port
        return addr
    if ":" in addr:  # bare IPv6 literal
        return f"[{addr}]:{port}"
    return f"{addr}:{port}"


def cluster_from_env(env: Mapping[str, str] = os.environ) -> Cluster:
    """Read the env vars the Training Operator injects into every JAXJob pod."""
    coordinator = coordinator_address(
        env.get("COORDINATOR_ADDRESS", "127.0.0.1").strip(),
        env.get("COORDINATOR_PORT", str(DEFAULT_PORT)).strip(),
    )
    num = int(env.get("NUM_PROCESSES", "1"))
    pid = int(env.get("PROCESS_ID", "0"))
    if num < 1 or not 0 <= pid < num:
        raise ValueError(f"invalid PROCESS_ID={pid} for NUM_PROCESSES={num}")
    return Cluster(coordinator, num, pid)


def init_distributed(cluster: Cluster, timeout_s: int) -> None:
    """Join the JAX distributed system (multi-process only) with gloo CPU collectives."""
    if cluster.num_processes == 1:
        return  # single process: plain local JAX, nothing to coordinate
    print(
        f"[process {cluster.process_id}/{cluster.num_processes}] joining coordinator "
        f"{cluster.coordinator} (timeout {timeout_s}s)",
        flush=True,
    )
    # Cross-process collectives on CPU: gloo over TCP. Already the default in recent jax;
    # set explicitly because older releases defaulted to none (no cross-process all-reduce).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=cluster.coordinator,
        num_processes=cluster.num_processes,
        process_id=cluster.process_id,
        initialization_timeout=timeout_s,
        heartbeat_timeout_seconds=timeout_s,
        shutdown_timeout_seconds=timeout_s,
    )


# --------------------------------------------------------------------------- data


def _read_idx(path: Path) -> np.ndarray:
    """Parse an IDX file (optionally gzipped) into a numpy array."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find_idx(data_dir: Path, stem: str) -> Path:
    dotted = stem.replace("-idx", ".idx")  # some mirrors name them train-images.idx3-ubyte
    for name in (stem, f"{stem}.gz", dotted, f"{dotted}.gz"):
        if (data_dir / name).is_file():
            return data_dir / name
    raise FileNotFoundError(f"{stem}[.gz] not found in {data_dir}")


def load_mnist(data_dir: Path) -> Dataset:
    """MNIST from the four standard IDX files in ``data_dir``."""

    def part(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        x = _read_idx(_find_idx(data_dir, f"{prefix}-images-idx3-ubyte"))
        y = _read_idx(_find_idx(data_dir, f"{prefix}-labels-idx1-ubyte"))
        return x.reshape(len(x), -1).astype(np.float32) / 255.0, y.astype(np.int32)

    x_train, y_train = part("train")
    x_test, y_test = part("t10k")
    return Dataset(x_train, y_train, x_test, y_test)


def load_digits(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's bundled 8x8 digits with a fixed shuffled train/test split."""
    from sklearn.datasets import load_digits as sk_load_digits

    digits = sk_load_digits()
    x = digits.data.astype(np.float32) / 16.0
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Dataset(x[train], y[train], x[test], y[test])


# --------------------------------------------------------------------------- model


def init_params(seed: int, sizes: tuple[int, ...]) -> dict[str, np.ndarray]:
    """He-initialised MLP weights on the host; identical on every process (same seed)."""
    rng = np.random.default_rng(seed)
    params: dict[str, np.ndarray] = {}
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        params[f"w{i}"] = rng.normal(0.0, np.sqrt(2.0 / n_in), (n_in, n_out)).astype(np.float32)
        params[f"b{i}"] = np.zeros(n_out, np.float32)
    return params


def replicate(tree: Any, sharding: NamedSharding) -> Any:
    """Turn identical host arrays on every process into global, replicated jax.Arrays."""
    return jax.tree.map(
        lambda a: jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx]), tree
    )


def forward(params: Params, x: jax.Array) -> jax.Array:
    """MLP logits: ReLU hidden layers, linear output."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < n_layers - 1:
            x = jax.nn.relu(x)
    return x


def loss_fn(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy over the (local) batch."""
    logp = jax.nn.log_softmax(forward(params, x))
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def adam(
    params: Params, grads: Params, state: OptState, lr: float, b1: float = 0.9, b2: float = 0.999
) -> tuple[Params, OptState]:
    """One Adam step in plain jax.numpy."""
    m, v, step = state
    step = step + 1
    m = jax.tree.map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
    scale = lr * jnp.sqrt(1 - b2**step) / (1 - b1**step)
    params = jax.tree.map(lambda p, m_, v_: p - scale * m_ / (jnp.sqrt(v_) + 1e-8), params, m, v)
    return params, (m, v, step)


def make_train_step(mesh: Mesh, lr: float) -> Callable[..., tuple[Params, OptState, jax.Array]]:
    """Jitted SPMD step: per-shard gradients, all-reduced (``pmean``) over ``data``."""

    def step(
        params: Params, state: OptState, x: jax.Array, y: jax.Array
    ) -> tuple[Params, OptState, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, "data")  # the cross-process all-reduce
        params, state = adam(params, grads, state, lr)
        return params, state, jax.lax.pmean(loss, "data")

    sharded = jax.shard_map(
        step,
        mesh=mesh,
        in_specs=(P(), P(), P("data"), P("data")),
        out_specs=(P(), P(), P()),
    )
    return jax.jit(sharded, donate_argnums=(0, 1))


# --------------------------------------------------------------------------- training


def train(args: argparse.Namespace, data: Dataset, cluster: Cluster) -> float:
    """Train data-parallel over all processes' devices; return the test accuracy."""
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, P())
    batch_sharding = NamedSharding(mesh, P("data"))
    n_shards = mesh.size
    if args.batch_size % n_shards:
        raise ValueError(f"--batch-size {args.batch_size} not divisible by {n_shards} devices")
    local_bs = args.batch_size // cluster.num_processes
    lo = cluster.process_id * local_bs  # this process' slice of every global batch

    sizes = (data.x_train.shape[1], *args.hidden, data.num_classes)
    host_params = init_params(args.seed, sizes)
    zeros = {k: np.zeros_like(v) for k, v in host_params.items()}
    params: Params = replicate(host_params, replicated)
    state: OptState = replicate((zeros, zeros, np.zeros((), np.float32)), replicated)
    train_step = make_train_step(mesh, args.lr)
    tag = f"[process {cluster.process_id}/{cluster.num_processes}]"
    steps = len(data.x_train) // args.batch_size

    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        order = np.random.default_rng(args.seed + epoch).permutation(len(data.x_train))
        losses = []
        for s in range(steps):
            idx = order[s * args.batch_size + lo : s * args.batch_size + lo + local_bs]
            x = jax.make_array_from_process_local_data(batch_sharding, data.x_train[idx])
            y = jax.make_array_from_process_local_data(batch_sharding, data.y_train[idx])
            params, state, loss = train_step(params, state, x, y)
            losses.append(loss)
        mean_loss = float(np.mean([np.asarray(loss.addressable_data(0)) for loss in losses]))
        print(
            f"{tag} epoch {epoch:3d} loss={mean_loss:.4f} ({time.perf_counter() - t0:.2f}s)",
            flush=True,
        )

    # Replicated parameters: every process holds a full local copy on its own device.
    local: Params = {k: v.addressable_data(0) for k, v in params.items()}
    if cluster.num_processes > 1:  # replicas must hold bit-identical parameters
        multihost_utils.assert_equal(local, "parameters diverged across processes")
    predictions = jnp.argmax(forward(local, jnp.asarray(data.x_test)), axis=1)
    return float(jnp.mean(predictions == jnp.asarray(data.y_test)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument(
        "--data-dir",
        type=Path,
        default=env.get("DATA_DIR") or None,
        help="directory with MNIST IDX files (default: sklearn 8x8 digits)",
    )
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=128, help="global batch size")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--hidden", type=int, nargs="*", default=[128], help="hidden layer sizes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--min-accuracy",
        type=float,
        default=0.0,
        help="exit with status 1 if the test accuracy is below this",
    )
    p.add_argument(
        "--init-timeout",
        type=int,
        default=int(env.get("JAX_INIT_TIMEOUT", "60")),
        help="seconds to wait for all processes to join (env JAX_INIT_TIMEOUT)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = cluster_from_env()
    t0 = time.perf_counter()
    init_distributed(cluster, args.init_timeout)
    tag = f"[process {cluster.process_id}/{cluster.num_processes}]"
    print(
        f"{tag} jax {jax.__version__}, coordinator {cluster.coordinator}, "
        f"devices: {jax.local_device_count()} local / {jax.device_count()} global",
        flush=True,
    )

    data = load_mnist(args.data_dir) if args.data_dir else load_digits(seed=args.seed)
    print(
        f"{tag} data: {len(data.x_train)} train / {len(data.x_test)} test, "
        f"{data.x_train.shape[1]} features",
        flush=True,
    )
    accuracy = train(args, data, cluster)
    print(f"{tag} done in {time.perf_counter() - t0:.1f}s", flush=True)
    print(f"test_accuracy={accuracy:.4f}", flush=True)
    if accuracy < args.min_accuracy:
        print(
            f"{tag} accuracy {accuracy:.4f} < --min-accuracy {args.min_accuracy}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
