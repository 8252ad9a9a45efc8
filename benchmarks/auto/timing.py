"""Cheap when off: the per-step cost of ``keep="auto"`` while it stays off (probes included) against a plain loop.

Both arms train the ConvNet at batch 256 on MNIST-1D batches held in memory. The auto arm's cost table says that
selection never pays (scoring as dear per sample as training), so the controller stays off: every loader batch is
trained whole, and every ``probe_every``-th one is scored too, for the estimate. Steps run in blocks of ``BLOCK``,
the arms alternating, ``ROUNDS`` rounds after a warm-up; the ratio is of the medians of thread CPU time per step.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import Auto, CostTable, SBLoader
from benchmarks.harness.data import dataset
from benchmarks.harness.models import MODELS, RECIPES
from benchmarks.harness.records import machine, write_results
from benchmarks.harness.timing import alternated, cpu_clock, interleaved

BLOCK, ROUNDS, WARMUP = 32, 41, 2
OFF = CostTable(score_per_sample=1.0, train_per_sample=1.0)  # scoring as dear as training: selection never pays


class Stepper:
    """One arm's training step, batch after batch, its source restarted when it runs out."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], auto: Auto | None, **options: Any) -> None:
        torch.manual_seed(0)
        self.model = MODELS["cnn"]()
        recipe = RECIPES["cnn"]
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=recipe["lr"], weight_decay=1e-4)
        self.weighted = bool(options.get("return_weights"))
        if auto is None:
            self.source: Any = batches
        else:
            self.source = SBLoader(batches, self.model, F.cross_entropy, keep=auto, **options)
        self.batches = iter(self.source)

    def step(self) -> None:
        batch = next(self.batches, None)
        if batch is None:
            self.batches = iter(self.source)
            batch = next(self.batches)
        self.model.train()
        if self.weighted:  # the weighted mean, as the importance-sampling arms train
            (x, y), weights = batch
            loss = (weights * F.cross_entropy(self.model(x), y, reduction="none")).sum()
        else:
            x, y = batch
            loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


def timing(out: Path, *, smoke: bool = False, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Interleaved per-step seconds of a plain loop and of auto while off; writes ``<out>/timing/summary.json``
    (``raw.json``: every block's seconds; ``machine.json``: the machine and the timing set-up ``info``)."""
    data = dataset(4096 if smoke else 20_000)
    x, y = data.x_train, data.y_train
    batches = [(x[i : i + 256], y[i : i + 256]) for i in range(0, len(x) - 255, 256)]
    auto = Auto()
    weighted = {"policy": "importance", "score": "gradnorm", "return_weights": True}
    arms = {
        "plain loop": Stepper(batches, None),
        "auto (off)": Stepper(batches, Auto(costs=OFF)),
        "auto importance-gradnorm (off)": Stepper(batches, Auto(costs=OFF), **weighted),
    }
    rounds = 3 if smoke else ROUNDS

    def block(stepper: Stepper) -> Callable[[int], float]:
        def run(_: int) -> float:
            started = cpu_clock()
            for _ in range(BLOCK):
                stepper.step()
            return (cpu_clock() - started) / BLOCK

        return run

    blocks = {name: block(stepper) for name, stepper in arms.items()}
    seconds: dict[str, list[float]] = interleaved(blocks, rounds, warmup=WARMUP, order=alternated)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    stats = arms["auto (off)"].source.stats
    plain = seconds["plain loop"]
    result = {
        "per_step_ms": {name: 1e3 * value for name, value in medians.items()},
        "ratio": medians["auto (off)"] / medians["plain loop"],
        "ratio_per_round": [a / p for a, p in zip(seconds["auto (off)"], plain, strict=True)],
        "ratio_weighted": medians["auto importance-gradnorm (off)"] / medians["plain loop"],
        "ratio_weighted_per_round": [
            a / p for a, p in zip(seconds["auto importance-gradnorm (off)"], plain, strict=True)
        ],
        "auto_on_share": stats.auto_on_share,
        "probe_every": auto.probe_every,
        "samples_scored": stats.samples_scored,
        "block": BLOCK,
        "rounds": rounds,
    }
    table = (
        "| arm | ms per step (median) |\n| --- | --- |\n"
        + "".join(f"| {name} | {1e3 * value:.3f} |\n" for name, value in medians.items())
        + f"\nauto (off) / plain loop: {result['ratio']:.3f}; importance-gradnorm, weighted: "
        + f"{result['ratio_weighted']:.3f} (target <= 1.02; on-share {stats.auto_on_share:.2f})\n"
    )
    write_results(out / "timing", result, table)
    (out / "timing" / "raw.json").write_text(json.dumps(seconds))
    (out / "timing" / "machine.json").write_text(json.dumps({**machine(), **(info or {})}, indent=1))
    return result
