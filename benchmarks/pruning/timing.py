"""Interleaved step timing for the pruning benchmark, and the seconds of a run priced from it.

The raw seconds of a run swing 2-5x with the shared machine's load, so every run is *priced* instead with step times
measured side by side (:func:`timing`: short interleaved blocks of steps, the order rotating every round, medians).
A run without selection costs ``sum over epochs of ceil(loaded / batch)`` steps of its kind: a plain step, or for a
pruning run the whole pruning step (its loader's id field, ``reduction="none"``, ``observe``, ``weights`` and the
weighted mean), plus its measured pruning decisions. What the sampler's calls alone add to a step is timed apart
(:func:`sampler_seconds`) for the overhead target. A run with SBLoader costs its loader batches at the step time
interpolated between the all-reused and the all-scored SBLoader step by its measured share of scored samples.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import LossCache, PruningSampler
from benchmarks.harness.data import dataset
from benchmarks.harness.models import MODELS
from benchmarks.harness.records import machine
from benchmarks.harness.timing import interleaved

from .arms import PruneArm


def _stepper(arm: PruneArm, family: str, data, prefill: bool):
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
    while True:
        batches.set_epoch(epoch)
        for batch in batches:
            x, y = batch[0], batch[1]
            model.train()
            if getattr(probe, "observe", False):
                losses = F.cross_entropy(model(x), y, reduction="none")
                probe.loader.observe(batch, losses)
                loss = (probe.weights(batch) * losses).mean()
            else:
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            yield
        epoch += 1


def step_kinds(family_lr: float, tuned: list[int]) -> dict[str, tuple[PruneArm, bool]]:
    kinds = {f"plain b={b}": (PruneArm("t", b, family_lr), False) for b in (32, 64, 128, 256)}
    for b in sorted(set(tuned)):
        kinds[f"prune b={b}"] = (PruneArm("t", b, family_lr, prune=0.5), True)
        kinds[f"sb-stale b={b}"] = (PruneArm("t", b, family_lr, sb_keep=0.5, staleness=0), False)
        kinds[f"sb-reuse b={b}"] = (PruneArm("t", b, family_lr, sb_keep=0.5, staleness=10**6), True)
    return kinds


def sampler_seconds(n: int, batch: int, repeats: int) -> float:
    """What the sampler adds to a training step, alone: ``observe`` and ``weights`` of a batch and the weighted mean
    (forward and backward) instead of the plain mean; the median of 5 trials of ``repeats`` steps."""
    cache = LossCache(size=n)
    cache.observe(torch.arange(n), torch.rand(n, generator=torch.Generator().manual_seed(0)), 0)
    sampler = PruningSampler(n, cache, epochs=10**6)
    sampler.set_epoch(1)
    ids = torch.randperm(n, generator=torch.Generator().manual_seed(1))[:batch]
    losses = torch.rand(batch, requires_grad=True)

    def trial(with_sampler: bool) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            if with_sampler:
                sampler.observe(ids, losses)
                (sampler.weights(ids) * losses).mean().backward()
            else:
                losses.mean().backward()
        return (time.perf_counter() - started) / repeats

    return max(0.0, statistics.median(trial(True) - trial(False) for _ in range(5)))


def _timed(stepper: Iterator, block: dict[str, int], name: str, seconds_per_block: float) -> Callable[[int], float]:
    """A timed block of ``block[name]`` steps; round 0 (the warm-up) sizes the block to ``seconds_per_block``."""

    def run(round_: int) -> float:
        started = time.perf_counter()
        for _ in range(block[name]):
            next(stepper)
        per_step = (time.perf_counter() - started) / block[name]
        if round_ == 0:
            block[name] = max(2, round(seconds_per_block / per_step))
        return per_step

    return run


def timing(out: Path, tuned: dict[str, list[int]], lrs: dict[str, float], smoke: bool = False) -> dict[str, Any]:
    """Median seconds per training step of every step kind, per model family, interleaved (blocks of about 0.25 s,
    the order rotating every round); writes ``<out>/timing/summary.json``. ``tuned``: family -> the tuned batch sizes
    of its suites."""
    rounds, seconds_per_block = (2, 0.0) if smoke else (12, 0.25)
    result: dict[str, Any] = {"machine": machine(), "rounds": rounds, "families": {}, "sampler_seconds": {}}
    for family, batches in tuned.items():
        data = dataset(2000 if smoke else 100_000)
        kinds = step_kinds(lrs[family], batches)
        steppers = {name: _stepper(arm, family, data, prefill) for name, (arm, prefill) in kinds.items()}
        for stepper in steppers.values():  # build each run (model, loader, prefilled cache) outside the timing
            next(stepper)
        block = dict.fromkeys(kinds, 2 if smoke else 10)

        blocks = {name: _timed(steppers[name], block, name, seconds_per_block) for name in kinds}
        times = interleaved(blocks, rounds, warmup=1)
        result["families"][family] = {
            name: {"seconds_per_step": statistics.median(values), "batch": kinds[name][0].batch, "block": block[name]}
            for name, values in times.items()
        }
        for b in sorted(set(batches)):
            n = len(data.y_train)
            result["sampler_seconds"][f"{family} b={b}"] = sampler_seconds(n, b, 20 if smoke else 2000)
    (out / "timing").mkdir(parents=True, exist_ok=True)
    (out / "timing" / "summary.json").write_text(json.dumps(result, indent=2))
    return result
