"""``advise``'s branch trial on the suite nobody tuned on (issue 28): the user's digits recipe, with ``advise`` called
on the live model and optimizer at the start and at a quarter of the run, against the suite's whole-run arms.

Design, commands and the record (``results/digits/trial/``): ``benchmarks/digits/README.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.harness.branch_trials import HEADER, suite_table, trial_runs
from benchmarks.harness.records import results_dir
from benchmarks.harness.train import constant

from .arms import RECIPE, DigitsArm, digits, model

TRIAL_RESULTS = results_dir("digits") / "trial"
POINTS = (0.0, 0.25)  # where the whole runs (selection from the start) speak
PROBE_SAMPLES = 288  # a fifth of the 1,437 training images
SEEDS = (0, 1, 2)
SMOKE_EPOCHS, SMOKE_SEEDS, SMOKE_TRIAL = 2, (0,), 16


def run_trial(out: Path, seeds: tuple[int, ...], epochs: int, trial: int, fixed: bool, info: dict[str, Any]) -> None:
    """The user's run per seed with ``advise``'s branch trial at :data:`POINTS`; appended to ``out/runs.jsonl``."""
    settings = {**info, "points": POINTS, "trial": trial, "probe_samples": PROBE_SAMPLES, "fixed_costs": fixed}
    data = digits()
    trial_runs(out, "digits", data, DigitsArm("user"), seeds, batch=int(RECIPE["batch"]), trial=trial, fixed=fixed,
               probe_samples=PROBE_SAMPLES, points=POINTS, settings=settings, record={"samples": len(data.y_train)},
               family="digits", epochs=epochs, schedule=constant, build_model=model, recipe=RECIPE)  # fmt: skip


def whole_run(main: Path) -> dict[str, tuple[float | None, int, int]]:
    """Top-k 0.25's, random 0.25's and the small-batch control's whole-run records: speed-up on the seed-mean curve,
    seeds that reached their user run's accuracy, seeds."""
    path = main / "summary.json"
    if not path.exists():
        return {}
    arms = json.loads(path.read_text())["arms"]
    out: dict[str, tuple[float | None, int, int]] = {}
    for arm in ("topk-0.25", "random-0.25", "small-batch"):
        if arm in arms:
            seeds = arms[arm]["per_seed"]
            speed = arms[arm].get("speedup")
            out[arm] = (speed if isinstance(speed, float) else None, sum(s["to_user"] is not None for s in seeds),
                        len(seeds))  # fmt: skip
    return out


def trial_report(out: Path, main: Path) -> str:
    """``out/table.md``: the trial's table beside the whole-run record; returns the text."""
    path = out / "runs.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = ["# `advise`'s branch trial on digits (issue 28)", "", HEADER, "",
             *suite_table("digits", records, whole_run(main))]  # fmt: skip
    text = "\n".join(lines)
    (out / "table.md").write_text(text)
    print(text)
    return text
