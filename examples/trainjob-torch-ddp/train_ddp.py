"""A small MLP trained with PyTorch DistributedDataParallel on scikit-learn's 8x8 digits,
started by `torchrun` on every node of a TrainJob on the torch-distributed runtime: torchrun
reads the runtime's PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and
PET_MASTER_PORT, rendezvous at node 0, and starts this script with RANK and WORLD_SIZE.

Each process trains on its own shard of the training set; DDP averages the gradients over
gloo (CPU), so every process ends with the same weights. Prints the loss as it goes, then
``test_accuracy=0.xxxx`` and ``weights_checksum=...`` (equal on every process when the
all-reduce worked); exits non-zero below ``--min-accuracy``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    images, labels = load_digits(return_X_y=True)
    train_x, test_x, train_y, test_y = train_test_split(
        images / 16.0, labels, test_size=0.25, random_state=0, stratify=labels
    )
    return (
        torch.tensor(train_x, dtype=torch.float32),
        torch.tensor(train_y),
        torch.tensor(test_x, dtype=torch.float32),
        torch.tensor(test_y),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[rank {rank}/{world}] node {os.environ.get('GROUP_RANK', '?')} joined", flush=True)
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    train_x, train_y, test_x, test_y = _data()
    shard_x, shard_y = train_x[rank::world], train_y[rank::world]
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_of = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        picked = torch.randint(0, len(shard_x), (args.batch,), generator=generator)
        optimizer.zero_grad()
        loss = loss_of(model(shard_x[picked]), shard_y[picked])
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        if step % 100 == 0 or step == args.steps:
            print(f"[rank {rank}/{world}] step {step} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
        checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"[rank {rank}/{world}] test_accuracy={accuracy:.4f}", flush=True)
    print(f"[rank {rank}/{world}] weights_checksum={checksum:.6f}", flush=True)
    dist.destroy_process_group()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
