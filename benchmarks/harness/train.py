"""Shared benchmark machinery: cached MNIST-1D, a seeded batch iterator, the LR recipe, and one training run.

A *run* trains one arm (see ``_arms.py``) for a fixed number of epochs with its LR schedule annealed to the end
of that budget, evaluates test accuracy at evenly spaced points of loader progress, and returns a JSON-ready
dict: the curve (progress, forward-equivalents, seconds, accuracy) and the final numbers. Evaluation time is
excluded from the seconds. Cost model (forward-equivalents, FE): a scoring forward counts 1 per sample times the
scoring pixel ratio, a trained sample counts 3 (forward plus a backward of about twice its cost), and a policy's
extra model (``ReducibleLoss``) counts 1 per scored sample; one-off costs (training the irreducible model) are
added up front.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from examples.common import MODELS, Split, accuracy, load_mnist1d

CACHE = Path(__file__).resolve().parent / ".cache"


def mnist1d(num_samples: int, cache: Path | None = CACHE) -> Split:
    """MNIST-1D (80/20 split) from ``examples/common.load_mnist1d``, cached as ``.npz`` (generation takes ~24 s)."""
    path = None if cache is None else cache / f"mnist1d_{num_samples}_seed42.npz"
    if path is not None and path.exists():
        with np.load(path) as z:
            return Split(*(torch.from_numpy(z[k]) for k in ("x_train", "y_train", "x_test", "y_test")))
    split = load_mnist1d(num_samples)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{k: getattr(split, k).numpy() for k in ("x_train", "y_train", "x_test", "y_test")})
    return split


def flip_labels(y: torch.Tensor, fraction: float, seed: int, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace ``fraction`` of the labels by a different class, chosen uniformly; returns (labels, flipped mask)."""
    g = torch.Generator().manual_seed(seed)
    flipped = torch.rand(len(y), generator=g) < fraction
    shift = torch.randint(1, classes, (len(y),), generator=g)
    return torch.where(flipped, (y + shift) % classes, y), flipped


@dataclass
class Data:
    """Training tensors (labels possibly noisy, with the clean ones kept to measure what selection trains on)
    and the clean test set."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    y_clean: torch.Tensor | None = None

    def fields(self, index: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """The training fields a batch carries: (x, y) or (x, y, clean y), optionally at ``index``."""
        out = (self.x_train, self.y_train) if self.y_clean is None else (self.x_train, self.y_train, self.y_clean)
        return out if index is None else tuple(t[index] for t in out)


def dataset(num_samples: int, noise: float = 0.0, noise_seed: int = 123, cache: Path | None = CACHE) -> Data:
    """MNIST-1D, with ``noise`` of the training labels flipped (a fixed pattern, the same for every arm and seed)."""
    split = mnist1d(num_samples, cache)
    data = Data(split.x_train, split.y_train, split.x_test, split.y_test)
    if noise:
        data.y_train, _ = flip_labels(split.y_train, noise, noise_seed)
        data.y_clean = split.y_train
    return data


class ShuffledBatches:
    """Batches of tensors in a permutation fixed by ``(seed, epoch)`` alone, so that every arm sees the samples in
    the same order whatever its batch size. Cheaper than a ``DataLoader`` over a ``TensorDataset``.
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...], batch_size: int, seed: int) -> None:
        self.tensors, self.batch_size, self.seed, self.epoch = tensors, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.tensors[0]) / self.batch_size)

    def __iter__(self):
        n = len(self.tensors[0])
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))
        for i in range(0, n, self.batch_size):
            idx = perm[i : i + self.batch_size]
            yield tuple(t[idx] for t in self.tensors)


def one_cycle(progress: float, max_lr: float, pct_start: float = 0.3) -> float:
    """``torch.optim.lr_scheduler.OneCycleLR``'s cosine shape as a function of training progress in [0, 1]."""
    initial = max_lr / 25
    final = initial / 1e4
    if progress < pct_start:
        return initial + (max_lr - initial) * (1 - math.cos(math.pi * progress / pct_start)) / 2
    q = min(1.0, (progress - pct_start) / (1 - pct_start))
    return final + (max_lr - final) * (1 + math.cos(math.pi * q)) / 2


RECIPES = {  # one fixed recipe per model family: AdamW, one-cycle LR keyed to loader progress, batch B
    "cnn": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
    "mlp": {"lr": 2e-3, "weight_decay": 1e-4, "batch": 256},
    "gru": {"lr": 3e-3, "weight_decay": 1e-4, "batch": 256},
}


def train_epochs(model, batches, epochs: int, recipe: dict, progress=None) -> None:
    """Plain training (used for the irreducible-loss model): the family recipe, no evaluation."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    total, step = epochs * len(batches), 0
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for x, y, *_ in batches:
            for group in optimizer.param_groups:
                group["lr"] = one_cycle(step / total, recipe["lr"])
            step += 1
            model.train()
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def train_run(
    split: Data, arm: Any, *, family: str, epochs: int, seed: int, evals: int = 8, clock: Any = time.perf_counter
) -> dict[str, Any]:
    """Train one arm for ``epochs`` (an annealed run of that budget) and return its JSON record.

    Args:
        split: train (possibly noisy) and clean test tensors.
        arm: an ``_arms.Arm``; ``arm.build(...)`` returns the iterable of training batches and a cost probe.
        family: model family, a key of ``examples.common.MODELS`` and ``RECIPES``.
        epochs: passes over the training set; the LR schedule anneals over exactly this budget.
        seed: initialisation and data-order seed (shared by every arm).
        evals: test evaluations at evenly spaced loader progress (the last at the end).
        clock: the seconds counted (evaluations excluded); wall-clock ``time.perf_counter`` by default,
            ``_timing.cpu_clock`` (this thread's CPU time) where processes share the cores.
    """
    recipe = {**RECIPES[family], **getattr(arm, "recipe", {})}  # an arm may tune batch and LR (pruning arms)
    torch.manual_seed(seed)
    model = MODELS[family]()
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    setup = clock()
    batches, probe = arm.build(model, split, family=family, batch=recipe["batch"], epochs=epochs, seed=seed)
    upfront_seconds = clock() - setup
    total = epochs * probe.loader_batches_per_epoch
    curve, trained, flipped, steps, seconds, next_eval = [], 0, 0, 0, upfront_seconds, 1
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        started = clock()
        for batch in batches:  # (x, y), then the clean labels of a noisy run, then ids for a cache
            x, y = batch[0], batch[1]
            consumed = probe.consumed(steps)
            for group in optimizer.param_groups:
                group["lr"] = one_cycle((consumed - 1) / total, recipe["lr"])
            model.train()
            weigh = getattr(probe, "weights", None)  # a pruning sampler's rescaling, or importance weights (* n)
            if probe.observe:
                losses = F.cross_entropy(model(x), y, reduction="none")
                probe.loader.observe(batch, losses)  # the one-line change a cache user makes
                loss = losses.mean() if weigh is None else (weigh(batch) * losses).mean()
            elif weigh is not None:
                loss = (weigh(batch) * F.cross_entropy(model(x), y, reduction="none")).mean()
            else:
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            trained += len(y)
            if split.y_clean is not None:
                flipped += int((y != batch[2]).sum())
            steps += 1
            if consumed >= next_eval * total / evals and next_eval < evals:
                seconds += clock() - started
                curve.append(_point(model, split, probe, consumed / total, trained, seconds, steps))
                next_eval += 1
                started = clock()
        seconds += clock() - started
    curve.append(_point(model, split, probe, 1.0, trained, seconds, steps))
    final = curve[-1]
    return {
        "arm": arm.name,
        "family": family,
        "epochs": epochs,
        "seed": seed,
        "accuracy": final["accuracy"],
        "fe": final["fe"],
        "seconds": final["seconds"],
        "steps": steps,
        "samples_trained": trained,
        "samples_scored": probe.scored(),
        "samples_reused": probe.reused(),
        "noisy_share": flipped / trained if split.y_clean is not None else None,
        "upfront_fe": probe.upfront_fe,
        "upfront_seconds": upfront_seconds,
        "curve": curve,
        "config": arm.describe(),
        **getattr(probe, "extra", dict)(),  # arm-specific measurements (e.g. samples loaded per epoch)
    }


def _point(model, split: Data, probe, progress: float, trained: int, seconds: float, steps: int) -> dict[str, Any]:
    fe = probe.upfront_fe + probe.scoring_fe() + 3 * trained
    acc = accuracy(model, split.x_test, split.y_test)
    return {"progress": round(progress, 4), "fe": fe, "seconds": round(seconds, 3), "accuracy": acc, "steps": steps}


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cpus": __import__("os").cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one run's record (a crash loses at most the run in progress)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def write_results(out: Path, name: str, results: dict[str, Any], table: str) -> None:
    """Write a timing script's ``<out>/<name>.json`` and ``<out>/table.md``, and print the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    (out / "table.md").write_text(table)
    print(table)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
