"""Arms of the pruning benchmark (issue 13): a baseline at any batch size and LR, and epoch-level pruning arms.

Every arm carries its own recipe (``batch``, ``lr``), which ``harness.train.train_run`` merges over the family's, so
every arm trains at the tuned batch size and LR. Pruning arms draw each epoch from a :class:`sbdata.PruningSampler`
over a dense ``LossCache`` fed by the training step's own losses (``observe``). The arms, one line each:
``benchmarks/pruning/README.md``."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from benchmarks.harness._sb import LossCache, PruningSampler, SBLoader
from benchmarks.harness.arms import OwnRecipe, Probe, SamplerObserver
from benchmarks.harness.data import ShuffledBatches, inputs_targets
from benchmarks.harness.models import MODELS
from benchmarks.harness.pruned import NoScoring, PrunedBatches, PruneProbe
from benchmarks.harness.train import endless_steps as steps


@dataclass(frozen=True)
class PruneArm(OwnRecipe):
    """One arm: plain training, pruning, SB with a cache, or both, at its own batch size and LR.

    Attributes:
        name: label in tables and plots.
        batch: training (loader) batch size.
        lr: peak LR of the one-cycle schedule.
        prune: pruning share ``r`` of the sampler (None: no sampler, every sample every epoch).
        rule: the sampler's rule name (``"infobatch"``, ``"random"``, or ``"top_losses"``: top-k by last loss plus a
            re-check share, whose shares are its own, ``prune`` only switching it on).
        anneal: share of final epochs on the full data.
        sb_keep: with a float, SBLoader (top-k, shrink layout) keeps this share of each batch, with the cache.
        staleness: the cache's staleness for SB (epochs).
    """

    name: str
    batch: int
    lr: float
    prune: float | None = None
    rule: str = "infobatch"
    anneal: float = 0.125
    sb_keep: float | None = None
    staleness: int = 2

    def build(self, model, split, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        tensors = split.fields()
        n = len(tensors[0])
        if self.prune is None and self.sb_keep is None:
            batches = ShuffledBatches(tensors, batch, seed)
            return batches, Probe(len(batches))
        tensors = (*tensors, torch.arange(n))
        cache = LossCache(staleness=self.staleness, size=n)
        sampler = PruningSampler(
            n, cache, epochs=epochs, prune=self.prune or 0.0, rule=self.rule, anneal=self.anneal, seed=seed
        )
        source = PrunedBatches(tensors, batch, sampler)
        if self.sb_keep is None:
            probe = NoScoring(source, sampler, None, source.full_batches)
            probe.loader = SamplerObserver(sampler)  # type: ignore[assignment]
            return source, probe
        loader = SBLoader(
            source,
            model,
            F.cross_entropy,
            keep=self.sb_keep,
            cache=cache,
            id_key=-1,
            generator=seed,
            nan_policy="keep",
            split=inputs_targets,
        )
        return loader, PruneProbe(source, sampler, loader, source.full_batches)


def grid(family_lr: float, batches: tuple[int, ...], multipliers: tuple[float, ...]) -> list[PruneArm]:
    """The tuning grid: batch sizes x LRs (multiples of the recipe's)."""
    return [PruneArm(f"tune b={b} lr={family_lr * m:g}", b, family_lr * m) for b in batches for m in multipliers]


def arms(best: dict[str, Any]) -> list[PruneArm]:
    """The arms judged against the tuned baseline, at its batch size and LR."""
    b, lr = best["batch"], best["lr"]
    return [
        PruneArm("baseline-tuned", b, lr),
        PruneArm("prune", b, lr, prune=0.5),
        PruneArm("prune-random", b, lr, prune=0.5, rule="random"),
        PruneArm("prune-top-losses", b, lr, prune=0.5, rule="top_losses"),  # issue 42: top 25% + 10% re-checked
        PruneArm("prune+sb", b, lr, prune=0.5, sb_keep=0.5),
        PruneArm("sb-cache", b, lr, sb_keep=0.5),
    ]


def endless_steps(arm: PruneArm, family: str, data, prefill: bool):
    """Endless training steps of ``arm`` (the harness's step: weights and observe where the arm has them)."""
    torch.manual_seed(0)
    model = MODELS[family]()
    optimizer = torch.optim.AdamW(model.parameters(), lr=arm.lr / 10)
    batches, probe = arm.build(model, data, family=family, batch=arm.batch, epochs=10**6, seed=0)
    n = len(data.y_train)
    epoch = 0
    if prefill:  # every loss known: the sampler prunes from its second epoch, a cache of any staleness reuses
        probe.sampler.cache.observe(torch.arange(n), torch.rand(n, generator=torch.Generator().manual_seed(0)), 0)
        epoch = 1
    return steps(model, optimizer, probe, batches, epoch)


def step_kinds(family_lr: float, tuned: list[int]) -> dict[str, tuple[PruneArm, bool]]:
    kinds = {f"plain b={b}": (PruneArm("t", b, family_lr), False) for b in (32, 64, 128, 256)}
    for b in sorted(set(tuned)):
        kinds[f"prune b={b}"] = (PruneArm("t", b, family_lr, prune=0.5), True)
        kinds[f"sb-stale b={b}"] = (PruneArm("t", b, family_lr, sb_keep=0.5, staleness=0), False)
        kinds[f"sb-reuse b={b}"] = (PruneArm("t", b, family_lr, sb_keep=0.5, staleness=10**6), True)
    return kinds


class Compressed(Dataset):
    """``n`` samples of ``length`` float32 values, each stored compressed and decoded on access."""

    def __init__(self, n: int, length: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.records = [zlib.compress(rng.normal(size=length).astype(np.float32).round(2).tobytes()) for _ in range(n)]
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        values = np.frombuffer(zlib.decompress(self.records[index]), dtype=np.float32)
        return torch.from_numpy(values.copy()), int(self.labels[index])
