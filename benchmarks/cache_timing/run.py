"""Seconds of whole cached runs against fresh scoring, interleaved epoch by epoch: what a LossCache saves in time.

Four arms (top-k keep 0.25, shrunk batches: fresh scoring, ``LossCache(staleness=2)``, with ``observe()``, and with
``refresh="scored"``) train from the same weights and data order, one epoch of each in turn, in thread CPU time; the
calibrated cost model (``harness/cost.py``) predicts each run from its own scoring sizes. Commands and the record:
``benchmarks/cache_timing/README.md``.
"""

from __future__ import annotations

import statistics
from collections import Counter

import torch

from benchmarks.harness._sb import BUCKETS, keep_count, sb_step_seconds
from benchmarks.harness.arms import Arm
from benchmarks.harness.cost import calibrate
from benchmarks.harness.data import dataset
from benchmarks.harness.models import MODELS, RECIPES
from benchmarks.harness.records import machine, results_dir, write_results
from benchmarks.harness.runs import cli
from benchmarks.harness.timing import cpu_clock, interleaved, setup
from benchmarks.harness.train import one_cycle, probed_step

RESULTS = results_dir("cache_timing")
ARMS = {
    "fresh": Arm("fresh", policy="topk", keep=0.25),
    "cache-s2": Arm("cache-s2", policy="topk", keep=0.25, staleness=2),
    "cache-s2-observe": Arm("cache-s2-observe", policy="topk", keep=0.25, staleness=2, observe=True),
    "cache-s2-observe-scored": Arm(
        "cache-s2-observe-scored", policy="topk", keep=0.25, staleness=2, observe=True, refresh="scored"
    ),
}
OBSERVING = {"cache-s2-observe": "observe", "cache-s2-observe-scored": 'observe (refresh="scored")'}


class Run:
    """One arm's training run, advanced an epoch at a time; counts its scoring forwards by size."""

    def __init__(self, arm: Arm, data, family: str, epochs: int, seed: int) -> None:
        recipe = RECIPES[family]
        torch.manual_seed(seed)
        self.model = MODELS[family]()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"]
        )
        self.batches, self.probe = arm.build(
            self.model, data, family=family, batch=recipe["batch"], epochs=epochs, seed=seed
        )
        self.recipe, self.total, self.epoch, self.steps, self.seconds = recipe, epochs, 0, 0, 0.0
        self.total *= self.probe.loader_batches_per_epoch
        self.sizes: Counter[int] = Counter()  # scoring forwards by batch size
        self.model.register_forward_pre_hook(self._count)

    def _count(self, module, args) -> None:
        if not torch.is_grad_enabled():
            self.sizes[args[0].shape[0]] += 1

    def train_epoch(self) -> None:
        self.batches.set_epoch(self.epoch)
        started = cpu_clock()
        for batch in self.batches:
            consumed = self.probe.consumed(self.steps)
            for group in self.optimizer.param_groups:
                group["lr"] = one_cycle((consumed - 1) / self.total, self.recipe["lr"])
            probed_step(self.model, self.optimizer, self.probe, batch)
            self.steps += 1
        self.seconds += cpu_clock() - started
        self.epoch += 1


def repeat(data, family: str, epochs: int, seed: int) -> dict:
    runs = {name: Run(arm, data, family, epochs, seed) for name, arm in ARMS.items()}
    interleaved({name: (lambda _, run=run: run.train_epoch()) for name, run in runs.items()}, epochs)
    return {
        name: {
            "seconds": run.seconds,
            "scoring_forwards": sum(run.sizes.values()),
            "scoring_sizes": dict(sorted(run.sizes.items())),
            "samples_scored": run.probe.scored(),
            "sb_steps": run.steps,
        }
        for name, run in runs.items()
    }


def predict(data, family: str, runs: dict, block: int, rounds: int) -> dict:
    """The cost model's seconds per run, from calibrated step costs and each run's own scoring sizes."""
    batch = RECIPES[family]["batch"]
    kept = keep_count(0.25, batch)
    sizes = sorted({size for run in runs.values() for size in run["scoring_sizes"]} | {batch})
    torch.manual_seed(0)
    loader, _ = ARMS["fresh"].build(MODELS[family](), data, family=family, batch=batch, epochs=1, seed=0)
    ready = next(iter(loader.loader))
    engine = loader.engine

    def step() -> None:
        engine.push(ready)
        while engine.outputs_ready:  # hand the outputs on, as a front end would
            engine.pop_output()

    costs = calibrate(
        MODELS[family], data.x_train, data.y_train, train_sizes=[batch, kept], score_sizes=sizes,
        engine_steps={"fresh": step}, engine_batch=batch, block=block, rounds=rounds, clock=cpu_clock,
    )  # fmt: skip
    predicted = {}
    for name, run in runs.items():
        steps = run["sb_steps"]
        scoring = {size: count / steps for size, count in run["scoring_sizes"].items()}
        scoring[0] = 1 - sum(scoring.values())
        per_step = sb_step_seconds(costs, batch, kept, overhead="fresh", scored=scoring)
        predicted[name] = per_step * steps
    return {"costs": costs.as_dict(), "seconds": predicted}


def table(results: dict) -> str:
    lines = [
        "| arm | seconds (median [min, max]) | x fresh (median [min, max]) | predicted s (x measured) | "
        "scoring forwards | distinct scoring sizes | samples scored (x fresh) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary, fresh = results["summary"], results["summary"]["fresh"]
    for name, row in summary.items():
        ratio = row["ratio_to_fresh"]
        lines.append(
            f"| {name} | {row['seconds']:.2f} [{row['min']:.2f}, {row['max']:.2f}] | {ratio[0]:.3f} "
            f"[{ratio[1]:.3f}, {ratio[2]:.3f}] | {row['predicted']:.2f} ({row['predicted'] / row['seconds']:.3f}) | "
            f"{row['scoring_forwards']} | {row['distinct_sizes']} | {row['samples_scored']} "
            f"({row['samples_scored'] / fresh['samples_scored']:.3f}) |"
        )
    lines.append("")
    for name, label in OBSERVING.items():
        obs = summary[name]["ratio_to_no_observe"]
        lines.append(
            f"{label} / no observe: {obs[0]:.3f} [{obs[1]:.3f}, {obs[2]:.3f}] (median [min, max] over repeats)"
        )
    return "\n".join(lines) + "\n"


def summarise(repeats: list[dict], predicted: dict) -> dict:
    def spread(values: list[float]) -> list[float]:
        return [statistics.median(values), min(values), max(values)]

    out = {}
    for name in ARMS:
        seconds = [r[name]["seconds"] for r in repeats]
        last = repeats[-1][name]
        out[name] = {
            "seconds": statistics.median(seconds),
            "min": min(seconds),
            "max": max(seconds),
            "ratio_to_fresh": spread([r[name]["seconds"] / r["fresh"]["seconds"] for r in repeats]),
            "predicted": predicted["seconds"][name],
            "scoring_forwards": last["scoring_forwards"],
            "distinct_sizes": len(last["scoring_sizes"]),
            "samples_scored": last["samples_scored"],
        }
    for name in OBSERVING:
        out[name]["ratio_to_no_observe"] = spread([r[name]["seconds"] / r["cache-s2"]["seconds"] for r in repeats])
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the cache_timing benchmark (see the module docstring); returns the exit status."""
    parser = cli("cache_timing", __doc__, out=RESULTS, smoke="2,000 samples, 4 epochs, 1 repeat", suite=True)
    parser.add_argument("--family", default="cnn", choices=list(RECIPES))
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.family, args.samples, args.epochs, args.repeats = "mlp", 2000, 4, 1
    timing = setup()
    data = dataset(args.samples)
    repeats = []
    for seed in range(args.repeats):
        repeats.append(repeat(data, args.family, args.epochs, seed))
        print(f"repeat {seed}: " + ", ".join(f"{k} {v['seconds']:.2f} s" for k, v in repeats[-1].items()), flush=True)
    predicted = predict(data, args.family, repeats[-1], block=4 if args.smoke else 8, rounds=2 if args.smoke else 7)
    config = {k: str(v) for k, v in vars(args).items()}
    results = {
        "machine": machine(), "timing": timing, "config": config, "buckets": BUCKETS, "repeats": repeats,
        "prediction": predicted, "summary": summarise(repeats, predicted),
    }  # fmt: skip
    write_results(args.out / args.suite, results, table(results))
    return 0
