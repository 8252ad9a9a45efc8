"""A third-party selection policy built from ``sbdata.policies``' public names alone, trained on MNIST-1D.

``SoftTopK`` keeps ``keep_count(keep, N)`` samples drawn without replacement with probability proportional to
``exp(score / temperature)`` (``gumbel_top_k``), so it is a sampling policy: it reports each kept sample's inclusion
probability, and ``return_weights=True`` turns those into unbiased importance weights. It declares the two booleans
the contract asks for (``fixed_count``, ``weighted``), refuses a bad option at construction (``bind``), and says
what a saved state depends on (``fingerprint``).

Needs the ``examples`` extra (MNIST-1D: ``pip install -e ".[examples]"`` from the clone's root). Run from the clone's
root::

    python examples/custom_policy.py --epochs 2     # about 30 s on a 2-core CPU
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader
from sbdata.policies import PolicyOptions, Selection, SelectionPolicy, gumbel_top_k, keep_count

# examples/common.py, beside this script (a script's own directory is importable)
from common import ConvNet, accuracy, load_mnist1d


class SoftTopK(SelectionPolicy):
    """Keep ``keep_count(keep, N)`` samples, drawn with probability proportional to ``exp(score / temperature)``.

    Args:
        temperature: > 0; small values approach top-k, large ones a uniform draw. Default 1.0 (in loss units).
    """

    fixed_count = True  # always keep_count(keep, N): the lockstep and the pool rely on it
    weighted = True  # Selection.prob holds each kept sample's inclusion probability

    def __init__(self, temperature: float = 1.0) -> None:
        if not temperature > 0:
            raise ValueError(f"SoftTopK(temperature=...) must be > 0, got {temperature!r}")
        self.temperature = float(temperature)

    def bind(self, options: PolicyOptions) -> None:
        if options.keep >= 1.0:
            raise ValueError("SoftTopK keeps a share below 1: pass keep < 1 (keep=1 trains on every sample)")

    def select(self, scores: torch.Tensor, keep: float, generator: torch.Generator) -> Selection:
        n = scores.shape[0]
        k = keep_count(keep, n)
        index, prob = gumbel_top_k(scores.float() / self.temperature, k, generator)
        return Selection(index, prob, k / n)

    def fingerprint(self) -> str:
        return f"SoftTopK(temperature={self.temperature})"


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4000)
    args = parser.parse_args(argv)
    split = load_mnist1d(args.samples)
    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = DataLoader(TensorDataset(split.x_train, split.y_train), batch_size=128, shuffle=True)
    loader = SBLoader(data, model, F.cross_entropy, keep=0.5, policy=SoftTopK(temperature=0.5), return_weights=True)
    for _ in range(args.epochs):
        model.train()
        for (x, y), weights in loader:
            loss = (F.cross_entropy(model(x), y, reduction="none") * weights).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    test = accuracy(model, split.x_test, split.y_test)
    fraction = loader.stats.backprop_fraction
    print(f"SoftTopK: test accuracy {test:.3f} after {args.epochs} epochs, {fraction:.2f} backprop")
    return test


if __name__ == "__main__":
    main()
