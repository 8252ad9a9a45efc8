"""Scoring agreement: do bf16-autocast scores keep the same samples as fp32 scores (issue 42's target: 0.9 or more)?

Commands, method and the record: ``benchmarks/scoring_agreement/README.md``. Each suite's model is scored twice by
sbdata's ``Scorer`` (bfloat16 autocast and full precision) on :data:`BATCHES` loader batches at a few points of
training, and compared with ``sbdata.scoring.compare``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import Scorer, causal_lm, compare
from benchmarks.harness.arms import BASELINE
from benchmarks.harness.data import ShuffledBatches, dataset, inputs_targets
from benchmarks.harness.lm import ByteLM, load_corpus
from benchmarks.harness.lm_arms import sequence_losses
from benchmarks.harness.lm_train import make_optimizer
from benchmarks.harness.records import machine, results_dir
from benchmarks.harness.timing import cpu_clock
from benchmarks.harness.train import train_run, train_step

RESULTS = results_dir("scoring_agreement")
KEEPS = (0.25, 0.5)
BATCHES = 16  # loader batches compared at each point
POINTS = (0.0, 0.25, 0.5, 0.9)  # shares of training at which the MNIST-1D models are measured
MNIST = {"samples": 20_000, "epochs": 4}
LM_STEPS, LM_EVERY, LM_BATCH, LM_LR = 1200, 300, 8, 4e-3
SMOKE = {"samples": 2000, "epochs": 1, "lm_steps": 20, "lm_every": 10, "batches": 2}


def measure(model: torch.nn.Module, batches: Iterable[tuple[Any, Any]], **hooks: Any) -> dict[str, Any]:
    """The kept sets' agreement of bf16 against fp32 scoring on ``batches`` of ``(inputs, targets)``, per keep: the
    mean and the lowest over the batches. ``hooks``: ``loss_fn`` (default cross-entropy), ``forward``, ``reduce``."""
    low = Scorer(hooks.pop("loss_fn", F.cross_entropy), autocast_dtype=torch.bfloat16, **hooks)
    full = low.replace(autocast_dtype=None)
    device = next(model.parameters()).device
    found: dict[float, list[float]] = {keep: [] for keep in KEEPS}
    for inputs, targets in batches:
        n = len(targets)
        a, b = low(model, inputs, targets, n, device), full(model, inputs, targets, n, device)
        for keep in KEEPS:
            found[keep].append(float(compare(a, b, keep).agreement))
    return {str(keep): {"mean": sum(v) / len(v), "lowest": min(v)} for keep, v in found.items()}


def mnist1d_suite(family: str, smoke: bool) -> list[dict[str, Any]]:
    """The family's user run (the recipe, batch 256, one-cycle), measured at :data:`POINTS`."""
    samples, epochs = (SMOKE["samples"], SMOKE["epochs"]) if smoke else (MNIST["samples"], MNIST["epochs"])
    count = SMOKE["batches"] if smoke else BATCHES
    data = dataset(samples)
    fixed = ShuffledBatches(data.fields(), 256, 7)

    def inspect(model: Any, progress: float, optimizer: Any) -> dict[str, Any]:
        chosen = [inputs_targets(batch) for _, batch in zip(range(count), fixed, strict=False)]
        return measure(model, chosen)

    record = train_run(data, replace(BASELINE, name="user"), family=family, epochs=epochs, seed=0, evals=1,
                       clock=cpu_clock, inspect=inspect, inspect_at=POINTS)  # fmt: skip
    return [{"at": i["at"], **{k: i[k] for k in map(str, KEEPS)}} for i in record["inspections"]]


def lm_suite(smoke: bool) -> list[dict[str, Any]]:
    """ByteLM on the standard library's bytes, batch 8, AdamW at 4e-3 (the suite's optimizer), measured every
    :data:`LM_EVERY` steps on :data:`BATCHES` fixed batches of 32 sequences."""
    steps, every = (SMOKE["lm_steps"], SMOKE["lm_every"]) if smoke else (LM_STEPS, LM_EVERY)
    count = SMOKE["batches"] if smoke else BATCHES
    corpus = load_corpus()
    torch.manual_seed(0)
    model = ByteLM()
    optimizer = make_optimizer(model, LM_LR)
    hooks = causal_lm()
    split: Callable[[Any], tuple[Any, Any]] = hooks.pop("split")
    order = torch.randperm(len(corpus.train), generator=torch.Generator().manual_seed(0))
    probe = [split({"input_ids": corpus.train[order[i * 32 : (i + 1) * 32]].long()}) for i in range(count)]
    points = []
    for step in range(steps + 1):
        if step % every == 0:
            points.append({"at": step / steps, **measure(model, probe, **dict(hooks))})
        if step == steps:
            break
        start = (count * 32 + step * LM_BATCH) % len(order)
        train_step(model, optimizer, {"input_ids": corpus.train[order[start : start + LM_BATCH]].long()},
                   losses=sequence_losses)  # fmt: skip
    return points


def table(found: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| suite | at | keep 0.25 mean (lowest) | keep 0.5 mean (lowest) |", "|---|---|---|---|"]
    for suite, points in found.items():
        for p in points:
            cells = [f"{p[str(k)]['mean']:.3f} ({p[str(k)]['lowest']:.3f})" for k in KEEPS]
            lines.append(f"| {suite} | {p['at']:.2f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure every suite (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks scoring_agreement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default results/scoring_agreement)")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: tiny runs, two batches per point")
    parser.add_argument(
        "--suites", nargs="*", default=["mlp", "cnn", "cnn64", "lm"], choices=["mlp", "cnn", "cnn64", "lm"]
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    found = {name: lm_suite(args.smoke) if name == "lm" else mnist1d_suite(name, args.smoke) for name in args.suites}
    folder = args.out / "all"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(found, indent=2))
    (folder / "table.md").write_text(table(found))
    (folder / "machine.json").write_text(json.dumps({**machine(), "smoke": args.smoke}, indent=2))
    print(table(found))
    return 0
