"""The benchmark suites: which data, model, arms and budgets each one runs.

Budgets are chosen in cost, not epochs: every arm runs at the epoch counts whose expected forward-equivalents are
about 40%, 70% and 100% of the reference (the baseline at its largest budget; 50% and 100% for the noisy suite),
from the arm's expected cost per epoch. So all arms are measured near the same cost points, and the equal-cost
comparison (at 60%) needs little interpolation. The sweep picks each policy's keep and schedule; the main suites
read its choice from ``results/time_to_accuracy/sweep/best.json`` (defaults below when it is missing, e.g. in smoke
mode).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .arms import BASELINE, Arm, composer, sb, small_batch
from .cost import cost_per_epoch

FRACTIONS = (0.4, 0.7, 1.0)
DEFAULT_BEST = {  # used when no sweep result exists
    "topk": {"keep": 0.33, "start": None, "pooled": True},
    "rank": {"keep": 0.33, "start": None, "pooled": True},
    "history": {"keep": 0.33, "start": None, "pooled": True},
    "topk-shrink": {"keep": 0.33, "start": None, "pooled": False},
    "rank-shrink": {"keep": 0.33, "start": None, "pooled": False},
}


DEFAULT = sb("sbdata-default", "topk", 0.5, pooled=False)  # SBLoader(loader, model, loss_fn) as it comes

RECIPE_SUITES = {  # the user's-recipe suites (auto, calibration): name: (samples, family, label noise, epochs)
    "cnn100k": (100_000, "cnn", 0.0, 8),
    "mlp100k": (100_000, "mlp", 0.0, 16),
    "noisy100k": (100_000, "cnn", 0.2, 8),
    "noisy30-100k": (100_000, "cnn", 0.3, 8),  # issue 28's second flipped-label suite (auto trials only)
    "cnn20k-noisy30-short": (20_000, "cnn", 0.3, 6),  # issue 42: a short noisy run (378 loader batches; auto only)
}


@dataclass
class Suite:
    """One benchmark: data, model family, the reference budget and the arms with their budgets."""

    name: str
    samples: int
    family: str
    reference_epochs: int
    arms: list[Arm]
    noise: float = 0.0
    seeds: tuple[int, ...] = (0, 1, 2)
    fractions: tuple[float, ...] = FRACTIONS
    budgets: dict[str, list[int]] = field(default_factory=dict)

    def epochs_for(self, arm: Arm) -> list[int]:
        """The arm's budgets: epochs at the cost fractions of the reference (or set explicitly)."""
        if arm.name in self.budgets:
            return self.budgets[arm.name]
        per_epoch = cost_per_epoch(arm)
        return sorted({max(1, round(self.reference_epochs * f / per_epoch)) for f in self.fractions})


def label(policy: str, cfg: dict[str, Any]) -> str:
    start = 0 if cfg["start"] is None else cfg["start"]
    return f"{policy} keep={cfg['keep']} start={start} {'fixed' if cfg['pooled'] else 'shrink'}"


def chosen(best_path: Path | None) -> dict[str, dict[str, Any]]:
    """The sweep's winners (per policy and layout), or the defaults."""
    if best_path is not None and best_path.exists():
        return {**DEFAULT_BEST, **json.loads(best_path.read_text())}
    return dict(DEFAULT_BEST)


def selection_arms(best: dict[str, dict[str, Any]]) -> list[Arm]:
    arms = []
    for name, cfg in best.items():
        policy = name.split("-")[0]
        arms.append(sb(name, policy, cfg["keep"], pooled=cfg["pooled"], start=cfg["start"]))
    return arms


def controls(best: dict[str, dict[str, Any]]) -> list[Arm]:
    """The controls at the keep of the best shrink arm (small batch, random) and of the best fixed arm (random)."""
    shrink_keep, fixed_keep = best["topk-shrink"]["keep"], best["topk"]["keep"]
    return [
        small_batch(shrink_keep),
        sb("random", "random", shrink_keep, pooled=False),
        sb("random-fixed", "random", fixed_keep, pooled=True),
    ]


def main_suite(name: str, samples: int, family: str, reference_epochs: int, best: dict) -> Suite:
    sel = [a for a in selection_arms(best) if a.name in ("topk", "rank", "history", "topk-shrink")]
    arms = [BASELINE, *controls(best)[:2], composer(), *sel, DEFAULT]
    return Suite(name, samples, family, reference_epochs, arms)


def noisy_suite(name: str, samples: int, reference_epochs: int, best: dict) -> Suite:
    topk = best["topk-shrink"]
    sel = [a for a in selection_arms(best) if a.name in ("topk", "topk-shrink", "history")]
    fixed = best["topk"]
    reducible = [
        Arm("reducible", policy="reducible", keep=topk["keep"], pooled=topk["pooled"], start=topk["start"]),
        Arm("reducible-fixed", policy="reducible", keep=fixed["keep"], pooled=True, start=fixed["start"]),
    ]
    arms = [BASELINE, sb("random", "random", topk["keep"], pooled=False), *sel, *reducible, DEFAULT]
    return Suite(name, samples, "cnn", reference_epochs, arms, noise=0.2, fractions=(0.5, 1.0))


def cache_suite(name: str, samples: int, reference_epochs: int, best: dict) -> Suite:
    """The stale-loss cache (issue 7) on the best shrink configuration: staleness 1, 2, 4, with and without
    ``observe``, against the same configuration scoring fresh every step and the baseline."""
    cfg = best["topk-shrink"]
    fresh = sb("topk-shrink", "topk", cfg["keep"], pooled=cfg["pooled"], start=cfg["start"])
    cached = [
        replace(fresh, name=f"cache-s{staleness}{'-observe' if observe else ''}", staleness=staleness, observe=observe)
        for observe in (False, True)
        for staleness in (1, 2, 4)
    ]
    suite = Suite(name, samples, "cnn", reference_epochs, [BASELINE, fresh, *cached])
    same_epochs = suite.epochs_for(fresh)[-1]  # also at the fresh arm's largest budget: accuracy at equal epochs
    suite.budgets = {arm.name: sorted({*suite.epochs_for(arm), same_epochs}) for arm in cached}
    return suite


def sweep_suite(samples: int = 100_000, reference_epochs: int = 8) -> Suite:
    """Policies x keep x schedule start x layout, one seed, two budgets (half and all the reference epochs)."""
    arms = [BASELINE, small_batch(0.33)]
    for policy in ("topk", "rank", "history"):
        for pooled in (True, False) if policy != "history" else (True,):
            for keep in (0.25, 0.33, 0.5):
                for start in (None, 0.5):
                    cfg = {"keep": keep, "start": start, "pooled": pooled}
                    arms.append(sb(label(policy, cfg), policy, keep, pooled=pooled, start=start))
    half = reference_epochs // 2
    budgets = {a.name: [half, reference_epochs] for a in arms[2:]}
    budgets["baseline"] = sorted({max(1, reference_epochs // 4), half, 3 * reference_epochs // 4, reference_epochs})
    budgets["baseline-small-batch"] = [half, reference_epochs]
    return Suite("sweep", samples, "cnn", reference_epochs, arms, seeds=(0,), budgets=budgets)


def suites(best_path: Path | None) -> dict[str, Suite]:
    best = chosen(best_path)
    return {
        "sweep": sweep_suite(),
        "clean100k": main_suite("clean100k", 100_000, "cnn", 8, best),
        "clean20k": main_suite("clean20k", 20_000, "cnn", 16, best),
        "noisy100k": noisy_suite("noisy100k", 100_000, 8, best),
        "mlp100k": main_suite("mlp100k", 100_000, "mlp", 16, best),
        "cache100k": cache_suite("cache100k", 100_000, 8, best),
    }


def smoke(suite: Suite) -> Suite:
    """Seconds-long version: 2,000 samples, one seed, tiny budgets, a few arms."""
    keep = {"baseline", "baseline-small-batch", "composer", "topk", "random", "reducible", "cache-s2-observe"}
    if suite.name == "cache100k":
        keep |= {"topk-shrink"}  # the cache table compares against fresh scoring
    arms = [a for a in suite.arms if a.name in keep]
    if suite.name == "sweep":
        arms += [a for a in suite.arms if a.policy is not None][:2]
    arms = [replace(a, il_epochs=1) for a in arms]
    return Suite(suite.name, 2000, suite.family, 2, arms, noise=suite.noise, seeds=(0,), fractions=(0.5, 1.0))
