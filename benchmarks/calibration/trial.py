"""``advise``'s branch trial along the user's run, against what the fixed arms measured over whole runs (issue 28,
item 5: "advise gives the measured answer").

Design, commands and records (``results/calibration/trial/<suite>/``; ``trial-N/`` with ``--trial-steps N``):
``benchmarks/calibration/README.md``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.harness.arms import BASELINE
from benchmarks.harness.branch_trials import HEADER, KEEPS, POINTS, STEPS, TRIAL, suite_table, trial_runs
from benchmarks.harness.data import dataset
from benchmarks.harness.models import RECIPES
from benchmarks.harness.suites import RECIPE_SUITES

SUITES = ("mlp100k", "cnn100k", "noisy100k", "noisy30-100k")
SEEDS: tuple[int, ...] = (0, 1, 2)
PROBE_SAMPLES = 2048  # the last training samples: the probe, held out of the advisor's loader
SMOKE_SAMPLES, SMOKE_EPOCHS, SMOKE_SEEDS, SMOKE_TRIAL = 10_000, 2, (0,), 16  # --smoke: seconds
WHOLE_RUN = "trials"  # results/auto/trials/report/report/summary.json: every suite's fixed arms (trials_table.py)


def prefix(trial_steps: int | None) -> str:
    """The record's folder: ``trial``, or ``trial-N`` for the length ablation's ``--trial-steps N``."""
    return "trial" if trial_steps is None else f"trial-{trial_steps}"


def run_trials(
    name: str, out: Path, smoke: bool, fixed: bool, info: dict[str, Any], trial_steps: int | None = None
) -> None:
    """The plain run of suite ``name`` per seed with a branch trial at ``POINTS``; appended to
    ``out/<prefix>/<name>/runs.jsonl`` (a rerun continues). ``trial_steps``: the trial's length instead of ``TRIAL``
    (the length ablation)."""
    samples, family, noise, epochs = RECIPE_SUITES[name]
    seeds, trial = SEEDS, TRIAL if trial_steps is None else trial_steps
    if smoke:
        samples, epochs, seeds, trial = SMOKE_SAMPLES, SMOKE_EPOCHS, SMOKE_SEEDS, SMOKE_TRIAL
    settings = {**info, "points": POINTS, "keeps": KEEPS, "steps": STEPS, "trial": trial, "fixed_costs": fixed}
    trial_runs(out / prefix(trial_steps) / name, name, dataset(samples, noise=noise), replace(BASELINE, name="user"),
               seeds, batch=int(RECIPES[family]["batch"]), trial=trial, fixed=fixed, probe_samples=PROBE_SAMPLES,
               points=POINTS, settings=settings, record={"samples": samples, "noise": noise, "fixed_costs": fixed},
               family=family, epochs=epochs)  # fmt: skip


def _whole_run(measured: Path, name: str) -> dict[str, tuple[float | None, int, int]]:
    """The suite's whole-run records: top-k and random at keep 0.25 (the auto benchmark's, speed-up on the seed-mean
    curve) and the small-batch control (the calibration table's measured mean of raw whole runs, where the suite has
    one); each (speed-up, seeds that reached the user's accuracy, seeds)."""
    out: dict[str, tuple[float | None, int, int]] = {}
    path = measured / "auto" / WHOLE_RUN / "report" / "summary.json"
    if path.exists():
        arms = json.loads(path.read_text())["suites"].get(name, {}).get("arms", {})
        for arm in ("topk-0.25", "random-0.25"):
            if arm in arms:
                got = arms[arm]
                out[arm] = (got.get("speedup_mean_curve"), got.get("reached", 0), len(got.get("seeds", [])))
    path = measured / "calibration" / "main" / name / "summary.json"
    if path.exists():
        for row in json.loads(path.read_text())["rows"]:
            if row["arm"] == "baseline-small-batch" and row["measured_seeds"]:
                seeds = row["measured_seeds"].values()
                out["small-batch"] = (row["measured_mean"], sum(v is not None for v in seeds), len(seeds))
    return out


def trial_report(out: Path, measured: Path, trial_steps: int | None = None) -> str:
    """``out/<prefix>/report/table.md``: per suite and point, the seed-mean measured speed-up of each option in the
    branch trial, the options recommended, and the whole-run measurement beside; returns the text."""
    lines = ["# `advise`'s branch trial along the user's run (issue 28)", "", HEADER, ""]
    for name in SUITES:
        path = out / prefix(trial_steps) / name / "runs.jsonl"
        if path.exists():
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            lines += suite_table(name, records, _whole_run(measured, name))
    text = "\n".join(lines)
    folder = out / prefix(trial_steps) / "report"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text(text)
    print(text)
    return text
