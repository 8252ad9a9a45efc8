"""Selective Backprop as the last stage of a torchdata.nodes pipeline, on MNIST-1D, with a mid-epoch resume.

The pipeline is SamplerWrapper -> ParallelMapper -> Batcher -> collate -> SBSelector, wrapped in a ``Loader``.
Halfway through the second epoch the script checkpoints the model, the optimizer and ``loader.state_dict()``,
trains on, then builds everything afresh from the checkpoint and checks that the resumed run trains on exactly
the same batches and ends with exactly the same weights.

Needs the ``torchdata`` and ``examples`` extras (``pip install -e ".[torchdata,examples]"`` from the clone's root).
Run from the clone's root::

    python examples/torchdata_nodes.py                         # 4000 samples, 4 epochs, about 10 s on a 2-core CPU
    python examples/torchdata_nodes.py --samples 1000 --epochs 2   # what the tests run
"""

from __future__ import annotations

import argparse
import io
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Sampler, TensorDataset, default_collate

from sbdata import Schedule

try:
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, SamplerWrapper

    from sbdata.nodes import SBSelector
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
else:
    MISSING = None

# examples/common.py, beside this script (a script's own directory is importable)
from common import ConvNet, accuracy, load_mnist1d


class EpochShuffle(Sampler[int]):
    """A seeded permutation per epoch. ``SamplerWrapper`` calls ``set_epoch``, so a restored pipeline reshuffles
    the epoch it resumes exactly as the interrupted one did."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist())

    def __len__(self) -> int:
        return self.size


def build(train: TensorDataset, args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer, Loader]:
    torch.manual_seed(args.seed)
    model = ConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    node = SamplerWrapper(EpochShuffle(len(train), args.seed))
    node = ParallelMapper(node, train.__getitem__, num_workers=2, method="thread")  # loading in threads, before
    node = Mapper(Batcher(node, batch_size=args.batch_size, drop_last=False), default_collate)
    steps = args.epochs * math.ceil(len(train) / args.batch_size)
    schedule = Schedule(start=0.25, end=1.0, total_steps=steps)  # plain warm-up, then SB on alternate batches
    node = SBSelector(node, model, F.cross_entropy, keep=args.keep, schedule=schedule)  # last, in this thread
    return model, optimizer, Loader(node)


def train(model, optimizer, loader, epochs: int, checkpoint_at: int | None = None) -> tuple[list, bytes | None]:
    """Train for ``epochs`` passes over ``loader``. Returns the batches trained on and, if ``checkpoint_at`` is
    given, the checkpoint (model, optimizer, loader state) taken after that many batches."""
    seen, checkpoint = [], None
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            seen.append((x, y))
            if len(seen) == checkpoint_at:
                buffer = io.BytesIO()
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save({**state, "loader": loader.state_dict()}, buffer)
                checkpoint = buffer.getvalue()
    return seen, checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=5000, help="MNIST-1D samples (80%% train). Default 5000.")
    parser.add_argument("--epochs", type=int, default=4, help="Training epochs. Default 4.")
    parser.add_argument("--batch-size", type=int, default=64, help="Loader batch size. Default 64.")
    parser.add_argument("--keep", type=float, default=0.5, help="Share of each SB batch trained on. Default 0.5.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if MISSING is not None:
        raise SystemExit(
            f'{MISSING}: this example needs the torchdata and examples extras: pip install -e ".[torchdata,examples]"'
        )
    torch.set_num_threads(1)
    split = load_mnist1d(args.samples)
    train_set = TensorDataset(split.x_train, split.y_train)
    per_epoch = math.ceil(len(train_set) / args.batch_size)
    checkpoint_at = per_epoch + per_epoch // 2  # the middle of the second epoch (of the first, with --epochs 1)
    if args.epochs == 1:
        checkpoint_at = per_epoch // 2

    # The uninterrupted run; the checkpoint is taken on the way.
    model, optimizer, loader = build(train_set, args)
    reference, checkpoint = train(model, optimizer, loader, args.epochs, checkpoint_at)
    stats = loader.root.stats
    test_accuracy = accuracy(model, split.x_test, split.y_test)
    print(f"trained {args.epochs} epochs: test accuracy {test_accuracy:.3f} (10 classes: chance is 0.100)")
    print(
        f"  {stats.steps} loader batches, {stats.sb_steps} selected; backprop on {stats.samples_yielded} of "
        f"{stats.samples_seen} samples ({stats.backprop_fraction:.0%}); mean loss kept {stats.mean_loss_kept:.3f} "
        f"vs dropped {stats.mean_loss_dropped:.3f}"
    )

    # What a fresh process would do: rebuild everything, load the checkpoint, finish the run.
    resumed_model, resumed_optimizer, resumed_loader = build(train_set, args)
    state = torch.load(io.BytesIO(checkpoint), weights_only=True)
    resumed_model.load_state_dict(state["model"])
    resumed_optimizer.load_state_dict(state["optimizer"])
    resumed_loader.load_state_dict(state["loader"])  # the next pass continues the saved epoch
    resumed, _ = train(resumed_model, resumed_optimizer, resumed_loader, args.epochs - checkpoint_at // per_epoch)
    reference_tail = reference[checkpoint_at:]
    same_batches = len(resumed) == len(reference_tail) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(resumed, reference_tail, strict=True)
    )
    same_weights = all(torch.equal(a, b) for a, b in zip(model.parameters(), resumed_model.parameters(), strict=True))
    if not (same_batches and same_weights):
        raise SystemExit(f"resume mismatch: batches equal {same_batches}, weights equal {same_weights}")
    print(
        f"resumed from the checkpoint after batch {checkpoint_at} (mid-epoch): the {len(resumed)} remaining "
        "batches and the final weights match the uninterrupted run exactly"
    )


if __name__ == "__main__":
    main()
