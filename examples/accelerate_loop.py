"""Selective Backprop in a Hugging Face Accelerate loop: prepare, then wrap; checkpoints hold every rank's state.

A small MLP learns a synthetic 4-class problem. Halfway through the second epoch the script saves the state with
``accelerator.save_state`` (which now also writes ``sbdata_rank{r}.pt`` for each rank), trains on, then rebuilds
everything, loads the state and checks that the resumed run trains on exactly the same samples.

Needs the ``accelerate`` extra (``pip install -e ".[accelerate]"`` from the clone's root). Run from the clone's root::

    python examples/accelerate_loop.py
    torchrun --nproc_per_node=2 examples/accelerate_loop.py     # two processes, each its own shard
"""

from __future__ import annotations

import argparse
import gc
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    from accelerate import Accelerator, DataLoaderConfiguration

    from sbdata.integrations.accelerate import wrap
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
else:
    MISSING = None


def make_data(samples: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] + 0.3 * torch.randn(samples, generator=generator) > 0).long()
    return TensorDataset(x, y, torch.arange(samples))


def build(data: TensorDataset, args: argparse.Namespace):
    # a seedable sampler makes each epoch's order a function of (seed, epoch), so a resumed epoch is the same epoch
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)  # first prepare (this shards) ...
    sb = wrap(accelerator, loader, model, F.cross_entropy, keep=args.keep)  # ... then wrap
    return accelerator, model, optimizer, sb


def train(accelerator, model, optimizer, sb, epochs, save_at=None, directory=None) -> list[list[int]]:
    trained = []
    for epoch in epochs:
        sb.set_epoch(epoch)
        for x, y, ids in sb:
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            trained.append(ids.tolist())
            if len(trained) == save_at:
                accelerator.save_state(directory)
    return trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--keep", type=float, default=0.5)
    args = parser.parse_args()
    if MISSING is not None:
        raise SystemExit(f'{MISSING}: this example needs the accelerate extra: pip install -e ".[accelerate]"')
    data = make_data(args.samples)
    accelerator, model, optimizer, sb = build(data, args)
    per_epoch = len(sb)
    save_at = per_epoch + per_epoch // 2
    with tempfile.TemporaryDirectory() as scratch:
        directory = accelerator.gather_for_metrics([scratch])[0] if accelerator.num_processes > 1 else scratch
        reference = train(accelerator, model, optimizer, sb, range(args.epochs), save_at, directory)
        with torch.no_grad():
            x, y, _ = data.tensors
            accuracy = (model(x).argmax(1) == y).float().mean().item()
        stats = sb.stats
        accelerator.print(
            f"{accelerator.num_processes} process(es), {args.epochs} epochs: train accuracy {accuracy:.3f} (4 classes, "
            f"chance 0.25); rank 0 backpropagated {stats.samples_yielded} of {stats.samples_seen} samples "
            f"({stats.backprop_fraction:.0%}), mean loss kept {stats.mean_loss_kept:.3f} vs dropped "
            f"{stats.mean_loss_dropped:.3f}"
        )
        accelerator, model, optimizer, sb = build(data, args)
        accelerator.load_state(directory)  # model, optimizer and this rank's selection state
        resumed = train(accelerator, model, optimizer, sb, range(save_at // per_epoch, args.epochs))
        accelerator.wait_for_everyone()
    if resumed != reference[save_at:]:
        raise SystemExit("the resumed run trained on different samples")
    accelerator.print(
        f"resumed mid-epoch from save_state after {save_at} batches: the {len(resumed)} remaining batches match"
    )
    accelerator.end_training()
    # torch 2.13 with gloo on CPU can abort at exit while a DDP model is still alive: free it, then end the group
    del accelerator, model, optimizer, sb
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
