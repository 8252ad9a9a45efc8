"""Epoch-level pruning (issue 13) against the tuned baseline, on MNIST-1D at 100,000 samples.

Stages: ``tune SUITE``, ``run SUITE``, ``timing`` (the interleaved step timing every table is priced at), ``loading``
(``DataLoader`` with 2 workers), ``report``, ``all``. Commands and records: ``benchmarks/pruning/README.md``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from benchmarks.harness._sb import LossCache, PruningSampler, with_index
from benchmarks.harness.data import dataset
from benchmarks.harness.models import RECIPES
from benchmarks.harness.records import machine, read_jsonl, results_dir
from benchmarks.harness.runs import cli, run_suite
from benchmarks.harness.suites import Suite
from benchmarks.harness.timing import alternated, interleaved, sized_block

from . import report as _report
from .arms import Compressed, PruneArm, arms, endless_steps, grid, step_kinds

RESULTS = results_dir("pruning")
SUITES = {  # name: (samples, family, label noise, reference epochs)
    "cnn100k": (100_000, "cnn", 0.0, 8),
    "mlp100k": (100_000, "mlp", 0.0, 16),
    "noisy100k": (100_000, "cnn", 0.2, 8),
}
SEEDS = {"baseline-tuned": 5, "prune": 5, "prune-random": 5}  # 3 for the other arms


GRIDS = {  # the MLP's best of the 3x3 grid sat at its smallest batch and largest LR, 1.3 points above the next: widened
    "mlp100k": ((32, 64, 128, 256), (0.5, 1.0, 2.0, 4.0)),
}
TUNED_ON = {"noisy100k": "cnn100k"}  # the noisy suite reuses the clean ConvNet's tuned recipe (time; see README)
BUDGETS = {  # epochs per arm: the tuned baseline at 1/2 to 1x the reference; pruned arms cost ~0.7x per epoch
    "cnn100k": {"baseline-tuned": [4, 6, 8], "prune": [5, 6, 8, 10], "prune-random": [5, 6, 8, 10],
                "prune+sb": [8], "sb-cache": [8], "baseline": [8]},
    "mlp100k": {"baseline-tuned": [8, 10, 12, 16], "prune": [10, 12, 16, 20], "prune-random": [10, 12, 16, 20],
                "prune+sb": [16], "sb-cache": [16], "baseline": [16]},
    "noisy100k": {"baseline-tuned": [4, 6, 8], "prune": [5, 6, 8], "prune-random": [5, 6, 8], "prune+sb": [8],
                  "baseline": [8]},
}  # fmt: skip


def tune_suite(name: str, smoke: bool) -> Suite:
    samples, family, noise, reference = SUITES[name]
    batches, multipliers = GRIDS.get(name, ((64, 128, 256), (0.5, 1.0, 2.0)))
    candidates = grid(RECIPES[family]["lr"], (64, 256) if smoke else batches, multipliers)
    if smoke:
        samples, reference, candidates = 2000, 2, candidates[:2] + candidates[-1:]
    budgets_ = {arm.name: [reference] for arm in candidates}
    return Suite(f"prune-{name}", samples, family, reference, candidates, noise=noise, seeds=(100,), budgets=budgets_)


def best_recipe(records: list[dict]) -> dict:
    """The tuning grid's best (batch, LR) by final test accuracy (ties: larger batch, which is faster)."""
    tuned = [r for r in records if r["arm"].startswith("tune ")]
    if not tuned:
        raise SystemExit("no tuning runs found: run `python -m benchmarks pruning tune <suite>` first")
    best = max(tuned, key=lambda r: (r["accuracy"], r["config"]["batch"]))
    return {"batch": best["config"]["batch"], "lr": best["config"]["lr"], "accuracy": best["accuracy"]}


def run_arms_suite(name: str, out: Path, smoke: bool) -> Suite:
    samples, family, noise, reference = SUITES[name]
    tuned_on = TUNED_ON.get(name, name)
    tuning = [r for r in read_jsonl(out / tuned_on / "runs.jsonl") if r["arm"].startswith("tune ")]
    expected = len(tune_suite(tuned_on, smoke).arms)
    if len(tuning) < expected:
        raise SystemExit(f"the tuning grid of {tuned_on} has {len(tuning)} of {expected} runs: run `tune` first")
    best = {**best_recipe(tuning), "tuned_on": tuned_on}
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "tuned.json").write_text(json.dumps(best, indent=2))
    plan = BUDGETS[name]
    chosen = [a for a in arms(best) if a.name in plan]
    chosen.append(PruneArm("baseline", RECIPES[family]["batch"], RECIPES[family]["lr"]))
    if smoke:
        samples, reference, plan = 2000, 4, {a.name: [4] for a in chosen}
    return Suite(f"prune-{name}", samples, family, reference, chosen, noise=noise, seeds=(0,), budgets=plan)


def main(argv: list[str] | None = None) -> int:
    """Run a stage of the pruning benchmark (see the module docstring); returns the exit status."""
    parser = cli("pruning", __doc__, out=RESULTS, smoke="2,000 samples, one seed, tiny budgets", workers=True)
    parser.add_argument("stage", choices=["tune", "run", "timing", "loading", "report", "all"])
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), help="for tune and run")
    parser.add_argument("--seeds", type=int, nargs="*", help="run these seeds (each arm keeps at most its count)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    worker = args.worker
    stages = ["tune", "run", "timing", "loading", "report"] if args.stage == "all" else [args.stage]
    names = [args.suite] if args.suite else (["cnn100k"] if args.smoke else sorted(SUITES))
    for stage in stages:
        if stage == "tune":
            for name in names:
                suite = tune_suite(name, args.smoke)
                records = run_suite(suite, args.out / name, worker=worker)
                (args.out / name / "tuned.json").write_text(json.dumps(best_recipe(records), indent=2))
        elif stage == "run":
            for name in names:
                suite = run_arms_suite(name, args.out, args.smoke)
                seeds = args.seeds if args.seeds is not None else list(range(5))
                for seed in seeds:  # one seed at a time, each arm up to its seed count
                    counts = {a.name: SEEDS.get(a.name, 3) for a in suite.arms}
                    step = replace(suite, seeds=(seed,), arms=[a for a in suite.arms if seed < counts[a.name]])
                    if args.smoke and seed > 0:
                        continue
                    run_suite(step, args.out / name, worker=worker)
        elif stage == "timing":
            tuned: dict[str, list[int]] = {}
            for name in sorted(SUITES) if not args.smoke else ["cnn100k"]:
                source = TUNED_ON.get(name, name)
                records = read_jsonl(args.out / source / "runs.jsonl")
                family = SUITES[name][1]
                tuned.setdefault(family, []).append(best_recipe(records)["batch"])
            lrs = {family: RECIPES[family]["lr"] for family in tuned}
            timing(args.out, tuned, lrs, smoke=args.smoke)
        elif stage == "loading":
            size = (2000, 256, 1) if args.smoke else (20_000, 4096, 3)
            result = loading(*size)
            (args.out / "loading").mkdir(parents=True, exist_ok=True)
            (args.out / "loading" / "summary.json").write_text(json.dumps(result, indent=2))
        else:
            timing_ = json.loads((args.out / "timing" / "summary.json").read_text())
            for name in names:
                path = args.out / name / "runs.jsonl"
                if not path.exists() or not any(r["arm"] == "baseline-tuned" for r in read_jsonl(path)):
                    continue
                samples, _, _, reference = SUITES[name]
                n = int(0.8 * (2000 if args.smoke else samples))
                reference = 4 if args.smoke else reference
                _report.report(read_jsonl(path), timing_, args.out / name, name, n, reference)
    return 0


# Interleaved step timing for the pruning benchmark, and the seconds of a run priced from it.
#
# The raw seconds of a run swing 2-5x with the shared machine's load, so every run is *priced* instead with step times
# measured side by side (:func:`timing`: short interleaved blocks of steps, the order rotating every round, medians).
# A run without selection costs ``sum over epochs of ceil(loaded / batch)`` steps of its kind: a plain step, or for a
# pruning run the whole pruning step (its loader's id field, ``reduction="none"``, ``observe``, ``weights`` and the
# weighted mean), plus its measured pruning decisions. What the sampler's calls alone add to a step is timed apart
# (:func:`sampler_seconds`) for the overhead target. A run with SBLoader costs its loader batches at the step time
# interpolated between the all-reused and the all-scored SBLoader step by its measured share of scored samples.


def sampler_seconds(n: int, batch: int, repeats: int) -> float:
    """What the sampler adds to a training step, alone: ``observe`` and ``weights`` of a batch and the weighted mean
    (forward and backward) instead of the plain mean; the median of 5 trials of ``repeats`` steps."""
    cache = LossCache(size=n)
    cache.observe(torch.arange(n), torch.rand(n, generator=torch.Generator().manual_seed(0)), 0)
    sampler = PruningSampler(n, cache, epochs=10**6)
    sampler.set_epoch(1)
    ids = torch.randperm(n, generator=torch.Generator().manual_seed(1))[:batch]
    losses = torch.rand(batch, requires_grad=True)

    def trial(with_sampler: bool) -> Callable[[int], float]:
        def run(_: int) -> float:
            started = time.perf_counter()
            for _ in range(repeats):
                if with_sampler:
                    sampler.observe(ids, losses)
                    (sampler.weights(ids) * losses).mean().backward()
                else:
                    losses.mean().backward()
            return (time.perf_counter() - started) / repeats

        return run

    times = interleaved({"with": trial(True), "without": trial(False)}, 5, order=alternated)
    return max(0.0, statistics.median(a - b for a, b in zip(times["with"], times["without"], strict=True)))


def timing(out: Path, tuned: dict[str, list[int]], lrs: dict[str, float], smoke: bool = False) -> dict[str, Any]:
    """Median seconds per training step of every step kind, per model family, interleaved (blocks of about 0.25 s,
    the order rotating every round); writes ``<out>/timing/summary.json``. ``tuned``: family -> the tuned batch sizes
    of its suites."""
    rounds, seconds_per_block = (2, 0.0) if smoke else (12, 0.25)
    result: dict[str, Any] = {"machine": machine(), "rounds": rounds, "families": {}, "sampler_seconds": {}}
    for family, batches in tuned.items():
        data = dataset(2000 if smoke else 100_000)
        kinds = step_kinds(lrs[family], batches)
        steppers = {name: endless_steps(arm, family, data, prefill) for name, (arm, prefill) in kinds.items()}
        for stepper in steppers.values():  # build each run (model, loader, prefilled cache) outside the timing
            next(stepper)
        block = dict.fromkeys(kinds, 2 if smoke else 10)

        clock = time.perf_counter
        blocks = {name: sized_block(steppers[name], block, name, seconds_per_block, clock) for name in kinds}
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


# The data pipeline's side of pruning: a map-style dataset that decodes each sample, loaded with DataLoader workers.
#
# Each sample is stored zlib-compressed (as an image or audio record would be) and decoded in ``__getitem__``; one
# epoch is loaded through ``DataLoader(num_workers=2)`` with the full data and with a ``PruningSampler`` whose cache
# holds losses from a skewed (exponential) distribution, as training losses are. Reports samples loaded and seconds per
# epoch for both, interleaved over a few rounds (medians).


def loading(n: int = 20_000, length: int = 4096, rounds: int = 3, workers: int = 2) -> dict[str, Any]:
    dataset = Compressed(n, length)
    cache = LossCache(size=n)
    cache.observe(torch.arange(n), torch.empty(n).exponential_(generator=torch.Generator().manual_seed(0)), 0)
    pruned = PruningSampler(dataset, cache, epochs=100, seed=0)
    full = PruningSampler(dataset, cache, epochs=100, prune=0.0, seed=0)
    loaded: dict[str, int] = {}

    def epoch(name: str, sampler: PruningSampler) -> Callable[[int], float]:
        def run(round_: int) -> float:
            sampler.set_epoch(round_ + 1)
            loader = DataLoader(with_index(dataset), batch_size=128, sampler=sampler, num_workers=workers)
            started, loaded[name] = time.perf_counter(), 0
            for _, _, index in loader:
                loaded[name] += len(index)
            return time.perf_counter() - started

        return run

    seconds = interleaved({"full": epoch("full", full), "pruned": epoch("pruned", pruned)}, rounds, order=alternated)
    out = {name: {"samples_loaded": loaded[name], "seconds": statistics.median(s)} for name, s in seconds.items()}
    out["config"] = {"samples": n, "values_per_sample": length, "num_workers": workers, "rounds": rounds}
    return out
