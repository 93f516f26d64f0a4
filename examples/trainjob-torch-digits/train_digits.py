"""Data-parallel softmax regression on scikit-learn's 8x8 digits across the nodes of a TrainJob
on the torch-distributed runtime, from the variables that runtime gives each node as torchrun
reads them: PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT.

Without torch (this example runs where only numpy and scikit-learn are installed), node 0
serves as the all-reduce: every step each node computes the gradient of its shard of the
batch, node 0 averages them over TCP and sends the mean back, so every node keeps identical
weights. Prints the loss as it goes and a final ``test_accuracy=0.xxxx``; exits non-zero on
failure (a peer that never came, an accuracy below ``--min-accuracy``).
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
_HEADER = struct.Struct("!Q")


@dataclass(frozen=True)
class Node:
    """This process's place in the job, as the Torch runtime tells it."""

    rank: int
    nodes: int
    master: tuple[str, int]


def node_from_env(env: Mapping[str, str] = os.environ) -> Node:
    nodes = int(env.get("PET_NNODES", "1"))
    rank = int(env.get("PET_NODE_RANK", "0"))
    if nodes < 1 or not 0 <= rank < nodes:
        raise ValueError(f"invalid PET_NODE_RANK={rank} for PET_NNODES={nodes}")
    master = (env.get("PET_MASTER_ADDR", "127.0.0.1"), int(env.get("PET_MASTER_PORT", "29500")))
    return Node(rank, nodes, master)


def _send(sock: socket.socket, array: Array) -> None:
    payload = np.ascontiguousarray(array, dtype=np.float64).tobytes()
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("a peer closed the connection mid-training")
        chunks += chunk
    return bytes(chunks)


def _receive(sock: socket.socket, shape: tuple[int, ...]) -> Array:
    (size,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    return np.frombuffer(_receive_exactly(sock, size), dtype=np.float64).reshape(shape).copy()


class AllReduce:
    """The mean of an array over every node, node 0 in the middle."""

    def __init__(self, node: Node, timeout: float) -> None:
        self.node = node
        self.peers: list[socket.socket] = []
        self.master: socket.socket | None = None
        if node.nodes == 1:
            return
        if node.rank == 0:
            server = socket.create_server(("", node.master[1]), reuse_port=False)
            server.settimeout(timeout)
            while len(self.peers) < node.nodes - 1:
                peer, _ = server.accept()
                peer.settimeout(timeout)
                self.peers.append(peer)
            server.close()
            print(f"[node 0] {node.nodes - 1} peer(s) joined on port {node.master[1]}", flush=True)
        else:
            self.master = self._connect(timeout)
            print(f"[node {node.rank}] reached the master at {node.master[0]}", flush=True)

    def _connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection(self.node.master, timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                continue
            sock.settimeout(timeout)
            return sock

    def mean(self, array: Array) -> Array:
        if self.node.nodes == 1:
            return array
        if self.master is not None:
            _send(self.master, array)
            return _receive(self.master, array.shape)
        total = array.copy()
        for peer in self.peers:
            total += _receive(peer, array.shape)
        total /= self.node.nodes
        for peer in self.peers:
            _send(peer, total)
        return total

    def close(self) -> None:
        for sock in [*self.peers, *([self.master] if self.master else [])]:
            sock.close()


def load_digits(seed: int) -> tuple[Array, NDArray[np.int64], Array, NDArray[np.int64]]:
    from sklearn.datasets import load_digits as sk_load_digits

    digits = sk_load_digits()
    x = np.asarray(digits.data, dtype=np.float64) / 16.0
    y = np.asarray(digits.target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    split = len(y) * 3 // 4
    return x[:split], y[:split], x[split:], y[split:]


def gradient(weights: Array, x: Array, y: NDArray[np.int64]) -> tuple[Array, float]:
    """Cross-entropy loss of softmax(x @ weights) (bias as the last input) and its gradient."""
    logits = x @ weights
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    loss = float(-np.log(probabilities[np.arange(len(y)), y] + 1e-12).mean())
    probabilities[np.arange(len(y)), y] -= 1.0
    return x.T @ probabilities / len(y), loss


def with_bias(x: Array) -> Array:
    return np.hstack([x, np.ones((len(x), 1))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128, help="global, over all nodes")
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for peers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    node = node_from_env()
    print(f"[node {node.rank}/{node.nodes}] master {node.master[0]}:{node.master[1]}", flush=True)
    reduce = AllReduce(node, args.timeout)
    x_train, y_train, x_test, y_test = load_digits(args.seed)
    x_train, x_test = with_bias(x_train), with_bias(x_test)
    weights = np.zeros((x_train.shape[1], 10))
    rng = np.random.default_rng(args.seed)  # the same batches on every node
    shard = args.batch_size // node.nodes
    for step in range(1, args.steps + 1):
        batch = rng.choice(len(y_train), size=shard * node.nodes, replace=False)
        mine = batch[node.rank * shard : (node.rank + 1) * shard]
        grad, loss = gradient(weights, x_train[mine], y_train[mine])
        weights -= args.learning_rate * reduce.mean(grad)
        if step % 50 == 0 or step == args.steps:
            mean_loss = float(reduce.mean(np.array([loss]))[0])
            print(f"[node {node.rank}] step {step} loss={mean_loss:.4f}", flush=True)
    reduce.close()
    accuracy = float(((x_test @ weights).argmax(axis=1) == y_test).mean())
    print(f"[node {node.rank}] test_accuracy={accuracy:.4f}", flush=True)
    if accuracy < args.min_accuracy:
        print(f"accuracy below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
