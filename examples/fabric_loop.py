"""Selective Backprop under Lightning Fabric: set the loader up with Fabric first, then wrap it; checkpoint the
``SBLoader`` through ``fabric.save`` / ``fabric.load`` with the model and optimizer.

Needs the ``lightning`` extra (``pip install -e ".[lightning]"`` from the clone's root). Run from the clone's root::

    python examples/fabric_loop.py                             # one CPU process
    fabric run --accelerator=cpu --devices=2 examples/fabric_loop.py    # DDP: each process wraps its own shard

It trains a small MLP on four overlapping Gaussian classes for ``--epochs`` epochs, saves a checkpoint in the middle
of the last epoch, finishes the epoch, then loads the checkpoint into a fresh loader and checks that the rest of the
epoch is trained on the same batches again. Under several processes the loader and its state take one more step
each (see ``make_loader`` and ``save``).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from sbdata import SBLoader

try:
    from lightning.fabric import Fabric
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
else:
    MISSING = None


def blobs(samples: int = 4096) -> tuple[TensorDataset, TensorDataset]:
    """Four Gaussian classes in 8 dimensions, partly overlapping (some samples stay hard): train and validation."""
    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (samples,), generator=generator)
    centers = torch.randn(4, 8, generator=generator) * 1.5
    x = centers[y] + torch.randn(samples, 8, generator=generator)
    return TensorDataset(x[:-512], y[:-512]), TensorDataset(x[-512:], y[-512:])


def make_loader(fabric: Fabric, train: TensorDataset, model: nn.Module, keep: float) -> SBLoader:
    """Fabric first (it shards and places the plain DataLoader), then the SBLoader over what it returns.

    Under several processes Fabric's loader sets its DistributedSampler's epoch to the number of passes it has made
    in this process, so a process that resumes mid-run would read its first pass in epoch 0's order. For a resume
    that reads the same batches, the loader there gets a DistributedSampler of its own, ordered by
    ``SBLoader.set_epoch``, and is not passed to ``setup_dataloaders`` (sbdata moves each batch to the model's
    device itself)."""
    if fabric.world_size > 1:
        shard = DistributedSampler(train, num_replicas=fabric.world_size, rank=fabric.global_rank, seed=0)
        return SBLoader(DataLoader(train, batch_size=64, sampler=shard), model, F.cross_entropy, keep=keep)
    order = torch.Generator().manual_seed(0)  # a seeded shuffle: a resumed epoch reads the same batches
    loader = fabric.setup_dataloaders(DataLoader(train, batch_size=64, shuffle=True, generator=order))
    return SBLoader(loader, model, F.cross_entropy, keep=keep)


def save(fabric: Fabric, path: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: SBLoader) -> None:
    """The model and optimizer through ``fabric.save``; the loader's state in the same call in one process, else in
    a file per rank (``fabric.save`` writes rank 0's objects alone, and each rank's selection state is its own)."""
    if fabric.world_size == 1:
        fabric.save(path, {"model": model, "optimizer": optimizer, "loader": loader})
        return
    fabric.save(path, {"model": model, "optimizer": optimizer})
    torch.save(loader.state_dict(), f"{path}.sbdata_rank{fabric.global_rank}.pt")


def load(fabric: Fabric, path: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: SBLoader) -> None:
    """What :func:`save` wrote, back into the objects, in place."""
    if fabric.world_size == 1:
        fabric.load(path, {"model": model, "optimizer": optimizer, "loader": loader})
        return
    fabric.load(path, {"model": model, "optimizer": optimizer})
    loader.load_state_dict(torch.load(f"{path}.sbdata_rank{fabric.global_rank}.pt", weights_only=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", type=float, default=0.5, help="share of each batch trained on (default 0.5)")
    args = parser.parse_args(argv)
    if MISSING is not None:
        raise SystemExit(f'{MISSING}: this example needs the lightning extra: pip install -e ".[lightning]"')
    fabric = Fabric(accelerator="cpu")  # devices and strategy from `fabric run`, or one process
    if "LT_CLI_USED" not in os.environ:  # `fabric run` has started the processes already (Fabric's own marker)
        fabric.launch()
    fabric.seed_everything(0)
    train, val = blobs()
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4))
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=3e-3))
    train_loader = make_loader(fabric, train, model, args.keep)
    path = os.path.join(tempfile.mkdtemp(), "fabric.ckpt")
    path = fabric.broadcast(path)  # one directory for every process

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
        return loss

    for epoch in range(args.epochs):
        train_loader.set_epoch(epoch)
        rest: list[torch.Tensor] = []  # the labels trained on after the checkpoint
        for i, (x, y) in enumerate(train_loader):
            if epoch == args.epochs - 1 and i > len(train_loader) // 2:
                rest.append(y)
            loss = step(x, y)
            if epoch == args.epochs - 1 and i == len(train_loader) // 2:  # after a training step: all in one state
                save(fabric, path, model, optimizer, train_loader)
        stats = train_loader.stats
        fabric.print(f"epoch {epoch}: loss {loss.item():.3f}, kept {stats.samples_kept} of {stats.samples_scored}")
    # A fresh loader, as a resumed process builds it; the model, optimizer and loader are restored in place
    resumed = make_loader(fabric, train, model, args.keep)
    load(fabric, path, model, optimizer, resumed)
    resumed.set_epoch(args.epochs - 1)  # as the resumed epoch loop would: a DistributedSampler orders by epoch
    again = []
    for x, y in resumed:  # the rest of the saved epoch, trained again from the saved state
        again.append(y)
        step(x, y)
    exact = len(again) == len(rest) and all(torch.equal(a, b) for a, b in zip(again, rest, strict=True))
    with torch.no_grad():
        accuracy = (model(val.tensors[0]).argmax(1) == val.tensors[1]).float().mean().item()
    fabric.print(f"resumed mid-epoch exactly: {exact}; validation accuracy {accuracy:.3f}")
    if not exact:
        raise SystemExit("the resumed loader read other batches than the uninterrupted epoch")


if __name__ == "__main__":
    main()
