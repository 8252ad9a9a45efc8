"""Selective Backprop under DistributedDataParallel, on MNIST-1D.

Needs the ``examples`` extra (MNIST-1D: ``pip install -e ".[examples]"`` from the clone's root). Run on CPU (gloo) or
GPUs (nccl), one process per device::

    torchrun --nproc_per_node=2 examples/ddp.py

Each rank trains on its shard (``DistributedSampler``); ``SBLoader`` scores each loader batch with the live
model (through ``model.module``, outside DDP's hooks), keeps the hardest share, and keeps the ranks in lockstep.
Prints each rank's kept counts and the final test accuracy.
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import sbdata
from sbdata.policies import POLICIES

# examples/common.py, beside this script (a script's own directory is importable)
from common import ConvNet, accuracy, load_mnist1d


def train_and_report(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    split = load_mnist1d(args.samples)  # the same data on every rank
    train = TensorDataset(split.x_train, split.y_train)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(
        ConvNet().to(device), device_ids=[device.index] if device.index is not None else None
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    pooled = {"batch_size": args.batch_size // 2} if args.policy == "history" else {}  # variable-count policy
    sb = sbdata.SBLoader(
        loader,
        model,
        F.cross_entropy,
        keep=args.keep,
        policy=args.policy,
        sync=args.sync,
        # plain warm-up for the first quarter of training, then SB on every other batch
        schedule=sbdata.Schedule(start=0.25, end=1.0, total_steps=args.epochs * len(loader)),
        **pooled,
    )

    steps = 0
    for epoch in range(args.epochs):
        sb.set_epoch(epoch)  # reaches the DistributedSampler
        for x, y in sb:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            steps += 1

    stats = sb.stats
    for turn in range(world):  # one rank at a time, so the lines do not interleave
        if turn == rank:
            print(
                f"rank {rank}: kept {stats.samples_kept} of {stats.samples_scored} scored samples on "
                f"{stats.sb_steps} SB steps; trained on {stats.samples_yielded} of {stats.samples_seen} samples "
                f"in {steps} steps (backprop fraction {stats.backprop_fraction:.2f})",
                flush=True,
            )
        dist.barrier()
    if rank == 0:
        test_accuracy = accuracy(model.module, split.x_test.to(device), split.y_test.to(device))
        print(f"final test accuracy: {test_accuracy:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4000, help="MNIST-1D samples, train and test. Default 4000.")
    parser.add_argument("--epochs", type=int, default=15, help="Default 15.")
    parser.add_argument("--batch-size", type=int, default=64, help="loader batch per rank. Default 64.")
    parser.add_argument("--keep", type=float, default=0.5, help="share kept on SB steps. Default 0.5.")
    parser.add_argument("--policy", default="rank", choices=sorted(POLICIES), help="Default rank.")
    parser.add_argument("--sync", default="local", choices=["local", "global"], help="Default local.")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate. Default 1e-2.")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    train_and_report(args, device)
    gc.collect()  # free DDP's reducer while the process group lives (else CPU runs can abort at exit)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
