"""Interleaved cost of every arm's training step: the noise-robust seconds behind time-to-accuracy.

Every step kind of the time-to-accuracy arms, per model family, in short interleaved blocks of loader batches (the
harness's timing loop; the median seconds per loader batch prices those runs), and in the same rounds the calibrated
cost model's calls (``harness/cost.py``), whose prediction is written beside. Commands and the record:
``benchmarks/throughput/README.md``.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.harness import suites as _suites
from benchmarks.harness._sb import costs_from, keep_count, sb_step_seconds
from benchmarks.harness.cost import calibrate, loader_batch_fe, step_kind
from benchmarks.harness.data import dataset
from benchmarks.harness.models import MODELS, RECIPES
from benchmarks.harness.records import machine, results_dir, write_results
from benchmarks.harness.runs import cli
from benchmarks.harness.timing import cpu_clock, interleaved, rotated, setup
from benchmarks.harness.train import endless_steps

RESULTS = results_dir("throughput")


def kinds(family: str, best_path: Path | None) -> dict:
    """Every step kind of the suites of ``family``, each as an always-on arm."""
    found = {}
    for suite in _suites.suites(best_path).values():
        if suite.family != family or suite.name == "sweep":
            continue
        for arm in suite.arms:
            if arm.staleness is not None:  # a cached arm's step cost changes from epoch to epoch: not timed here
                continue
            found.setdefault(step_kind(arm), replace(arm, start=None, interrupt=0, il_epochs=1))
    return found


def stepper(arm, family: str, data, batch: int):
    """An endless generator of training steps; yields the loader batches consumed after each one."""
    torch.manual_seed(0)
    model = MODELS[family]()
    recipe = RECIPES[family]
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"] / 10, weight_decay=recipe["weight_decay"])
    batches, probe = arm.build(model, data, family=family, batch=batch, epochs=1000, seed=0)
    return endless_steps(model, optimizer, probe, batches)


def measure(family: str, samples: int, block: int, rounds: int, best_path: Path | None) -> dict:
    data = dataset(samples)
    batch = RECIPES[family]["batch"]
    arms = kinds(family, best_path)
    gens = {name: stepper(arm, family, data, batch) for name, arm in arms.items()}
    consumed = {name: 0 for name in arms}
    times: dict[str, list[float]] = {name: [] for name in arms}

    def run_block(name: str) -> float:
        target = consumed[name] + block
        started = cpu_clock()
        while consumed[name] < target:
            consumed[name] = next(gens[name])
        elapsed = cpu_clock() - started
        return elapsed / (consumed[name] - target + block)

    calls = arm_calibration_calls(family, data, arms, batch)  # the cost model's calls, timed in the same rounds
    sizes = {keep_count(arm.keep, batch) if arm.small_batch else batch for arm in arms.values() if arm.policy is None}
    plain = [f"plain {size}" for size in sorted(sizes)]
    calls.update({name: calls[name.replace("plain", "train")] for name in plain})
    calibration: dict[str, list[float]] = {name: [] for name in calls}
    for name in arms:
        run_block(name)  # warm-up
    for call in calls.values():
        call()
    order = [call for call in calls if call not in plain]

    def calibrate_round(r: int) -> None:  # the cost model's calls, in the same rounds as the step kinds
        for call in plain:  # training steps back to back, as the plain arms run them
            started = cpu_clock()
            for _ in range(block):
                calls[call]()
            calibration[call].append((cpu_clock() - started) / block)
        for i in range(block):
            for call in rotated(order, r + i):
                started = cpu_clock()
                calls[call]()
                calibration[call].append(cpu_clock() - started)

    blocks = {name: (lambda _, name=name: run_block(name)) for name in arms}
    times.update(interleaved(blocks, rounds, after_round=calibrate_round))
    costs = costs_from({call: statistics.median(values) for call, values in calibration.items()}, batch)
    predicted = predict(costs, arms, batch)
    out = {}
    for name, arm in arms.items():
        loader_batch = keep_count(arm.keep, batch) if arm.small_batch else batch
        kept = keep_count(arm.keep, batch)
        ts = times[name]
        out[name] = {
            "seconds_per_loader_batch": statistics.median(ts),
            "min": min(ts),
            "max": max(ts),
            "loader_batch": loader_batch,
            "predicted_seconds_per_loader_batch": predicted[name],
            "fe_per_loader_batch": loader_batch_fe(arm, batch, loader_batch, kept),
            "loader_batches_per_epoch": -(-len(data.y_train) // loader_batch),
        }
    return {"steps": out, "costs": costs.as_dict()}


def arm_calibration_calls(family: str, data, arms: dict, batch: int) -> dict:
    """The cost model's calls (``harness/cost.py``): data gathers, training steps and scoring forwards at the
    arms' batch sizes, and each SB configuration's engine step on a ready batch."""
    steps = {}
    for name, arm in arms.items():
        if arm.policy is None:
            continue
        torch.manual_seed(0)
        loader, _ = arm.build(MODELS[family](), data, family=family, batch=batch, epochs=1000, seed=0)
        ready = itertools.cycle(list(itertools.islice(iter(loader.loader), 4)))
        engine = loader.engine

        def step(engine=engine, ready=ready) -> None:
            engine.push(next(ready))
            while engine.outputs_ready:  # hand the outputs on, as a front end would
                engine.pop_output()

        steps[name] = step
    recipe = RECIPES[family]
    return calibrate(
        MODELS[family],
        data.x_train,
        data.y_train,
        train_sizes=[batch, *(keep_count(arm.keep, batch) for arm in arms.values())],
        score_sizes=[batch],
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=recipe["lr"] / 10, weight_decay=1e-4),
        engine_steps=steps,
        engine_batch=batch,
        measure=False,
    )


def predict(costs, arms: dict, batch: int) -> dict[str, float]:
    """Each step kind's seconds per loader batch, as the calibrated cost model predicts them."""
    predicted = {}
    for name, arm in arms.items():
        kept = keep_count(arm.keep, batch)
        if arm.policy is None:
            predicted[name] = costs.plain_step(kept if arm.small_batch else batch)
        else:
            predicted[name] = sb_step_seconds(costs, batch, kept, overhead=name, fixed=arm.pooled)
    return predicted


def table(results: dict) -> str:
    """Predicted against measured seconds per loader batch and per epoch, with FE, for every step kind."""
    lines = [
        "| model | step kind | FE / loader batch | predicted ms / loader batch | measured ms / loader batch "
        "[min, max] | predicted / measured | predicted s / epoch | measured s / epoch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for family, found in results["families"].items():
        base = found["steps"]["plain batch B"]
        for name, r in found["steps"].items():
            per_epoch = r["loader_batches_per_epoch"]
            lines.append(
                f"| {family} | {name} | {r['fe_per_loader_batch'] / base['fe_per_loader_batch']:.2f}x | "
                f"{1e3 * r['predicted_seconds_per_loader_batch']:.2f} | {1e3 * r['seconds_per_loader_batch']:.2f} "
                f"[{1e3 * r['min']:.2f}, {1e3 * r['max']:.2f}] | "
                f"{r['predicted_seconds_per_loader_batch'] / r['seconds_per_loader_batch']:.3f} | "
                f"{per_epoch * r['predicted_seconds_per_loader_batch']:.2f} | "
                f"{per_epoch * r['seconds_per_loader_batch']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the throughput benchmark (see the module docstring); returns the exit status."""
    parser = cli("throughput", __doc__, out=RESULTS, smoke="2,000 samples, 2 blocks of 2", suite=True)
    parser.add_argument("--families", nargs="*", default=["cnn", "mlp"])
    parser.add_argument("--block", type=int, default=24, help="loader batches per timed block (default 24)")
    parser.add_argument("--rounds", type=int, default=15, help="timed blocks per step kind (default 15)")
    parser.add_argument("--best", type=Path, default=results_dir("time_to_accuracy") / "sweep" / "best.json")
    args = parser.parse_args(argv)
    samples = 2000 if args.smoke else 100_000
    if args.smoke:
        args.families, args.block, args.rounds = ["mlp"], 2, 2
    timing = setup()
    config = {k: str(v) for k, v in vars(args).items()}
    results = {"machine": machine(), "timing": timing, "config": config, "families": {}}
    for family in args.families:
        results["families"][family] = measure(family, samples, args.block, args.rounds, args.best)
        for name, r in results["families"][family]["steps"].items():
            measured, predicted = r["seconds_per_loader_batch"], r["predicted_seconds_per_loader_batch"]
            print(f"{family} {name:<40} {1e3 * measured:8.2f} ms measured, {1e3 * predicted:8.2f} predicted")
    write_results(args.out / args.suite, results, table(results))
    return 0
