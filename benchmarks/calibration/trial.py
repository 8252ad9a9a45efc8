"""``advise``'s branch trial along the user's run, against what the fixed arms measured over whole runs (issue 28,
item 5: "advise gives the measured answer").

Exact commands (from the repository root; run alone, one process; the recorded run's time is in the README):

    python -m benchmarks calibration trial cnn100k      # and mlp100k, noisy100k, noisy30-100k
    python -m benchmarks calibration trial-report       # -> benchmarks/results/calibration/trial-report/table.md
    python -m benchmarks calibration trial mlp100k --smoke --fixed-costs --out /tmp/trial   # seconds (the test)
    python -m benchmarks calibration trial mlp100k --trial-steps 128   # the length ablation: trial-128-<suite>/
    python -m benchmarks calibration trial-report --trial-steps 128    # -> trial-128-report/table.md

Folders (the results layout, ``<benchmark>/<suite>/``): ``trial-<suite>/`` per suite and ``trial-report/table.md``;
with ``--trial-steps N``, ``trial-N-<suite>/`` and ``trial-N-report/``.

Per suite and seed, the user's recipe (the plain arm, ``harness/train.train_run``) is trained, and at the start and
at 25%, 50% and 75% of the run ``advise(..., optimizer=<the live optimizer>, trial_steps=TRIAL)`` is called on the
live model: every option (whole batches; top-k and ``random`` at keeps 0.25 and 0.5; the smaller batches 64 and 128
at the live LR) trains ``TRIAL`` loader batches (about three epochs) on its own copy of the model and of the
optimizer (moments and LR as they are), the options stepping in turn on each batch, measured every ``TRIAL // 8``
batches on a probe: the last ``PROBE_SAMPLES`` training samples, left out of the advisor's loader, so no branch trains
on them (the user's run trains on them, under every branch alike; the noisy suites' probe labels are the flipped
training labels, so its accuracy is at most about 80% / 70%). Its seconds are excluded from the run's. The measured
side of the judgment is the auto benchmark's whole-run records (``results/auto/trials*/summary.json``: top-k and
random at keep 0.25, to the user's accuracy) and, for the smaller batch, the calibration table's small-batch control.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch.nn.functional as F

from benchmarks.harness._sb import CostTable, advise
from benchmarks.harness.arms import BASELINE
from benchmarks.harness.data import ShuffledBatches, dataset
from benchmarks.harness.models import RECIPES
from benchmarks.harness.records import machine
from benchmarks.harness.runs import Job, run_loop
from benchmarks.harness.suites import RECIPE_SUITES
from benchmarks.harness.timing import cpu_clock
from benchmarks.harness.train import train_run

SUITES = ("mlp100k", "cnn100k", "noisy100k", "noisy30-100k")
SEEDS: tuple[int, ...] = (0, 1, 2)
POINTS = (0.0, 0.25, 0.5, 0.75)
KEEPS = (0.25, 0.5)
STEPS = 16  # timed loader batches before the trial (advise's prediction)
TRIAL = 1024  # loader batches per option (advise's default)
PROBE_SAMPLES = 2048  # the last training samples: the probe, held out of the advisor's loader
ORDER = 7_919  # the advisor reads the training set in an order of its own
FIXED = CostTable.forward_equivalents()
SMOKE_SAMPLES, SMOKE_EPOCHS, SMOKE_SEEDS, SMOKE_TRIAL = 10_000, 2, (0,), 16  # --smoke: seconds
WHOLE_RUN = "trials"  # results/auto/trials/summary.json: every suite's fixed arms (trials_table.py)
EARLY = (0.0, 0.25)  # the points a whole run's record speaks for: a run that selects from (about) its start


def _inputs_targets(batch: tuple[Any, ...]) -> tuple[Any, Any]:
    return batch[0], batch[1]


def trialler(data: Any, family: str, seed: int, fixed: bool, trial: int) -> Any:
    """``inspect(model, progress, optimizer)`` for ``train_run``: ``advise`` with a branch trial, as a record."""
    recipe = RECIPES[family]
    batch = int(recipe["batch"])
    calls = [0]

    fields = data.fields()[:2]  # inputs and (possibly flipped) training labels
    probe = list(ShuffledBatches(tuple(t[-PROBE_SAMPLES:] for t in fields), batch, seed))

    def inspect(model: Any, progress: float, optimizer: Any) -> dict[str, Any]:
        loader = ShuffledBatches(tuple(t[:-PROBE_SAMPLES] for t in fields), batch, seed + ORDER)
        loader.set_epoch(calls[0])
        calls[0] += 1
        started = time.perf_counter()
        steps = min(STEPS, max(4, len(loader) // 4))
        advice = advise(
            loader, model, F.cross_entropy, steps=steps, keeps=KEEPS, optimizer=optimizer, trial_steps=trial,
            probe=probe, split=_inputs_targets, costs=FIXED if fixed else None,
        )  # fmt: skip
        rows = [{k: v for k, v in row.items() if k != "curve"} | {"curve": list(zip(*_curve(row), strict=True))}
                for row in advice.trial]  # fmt: skip
        predicted = {row["option"]: [row["low"], row["high"]] for row in advice.rows if not row["cache"]}
        return {"trial": rows, "predicted": predicted, "recommendation": advice.recommendation,
                "trial_steps": advice.trial_steps, "lr": optimizer.param_groups[0]["lr"],
                "advise_seconds": time.perf_counter() - started}  # fmt: skip

    return inspect


def _curve(row: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return row["curve"].seconds, row["curve"].quality


def prefix(trial_steps: int | None) -> str:
    """The results folders' prefix: ``trial-``, or ``trial-N-`` for the length ablation's ``--trial-steps N``."""
    return "trial-" if trial_steps is None else f"trial-{trial_steps}-"


def run_trials(
    name: str, out: Path, smoke: bool, fixed: bool, info: dict[str, Any], trial_steps: int | None = None
) -> None:
    """The plain run of suite ``name`` per seed with a branch trial at ``POINTS``; appended to
    ``out/<prefix><name>/runs.jsonl`` (a rerun continues). ``trial_steps``: the trial's length instead of ``TRIAL``
    (the length ablation)."""
    samples, family, noise, epochs = RECIPE_SUITES[name]
    seeds, trial = SEEDS, TRIAL if trial_steps is None else trial_steps
    if smoke:
        samples, epochs, seeds, trial = SMOKE_SAMPLES, SMOKE_EPOCHS, SMOKE_SEEDS, SMOKE_TRIAL
    folder = out / f"{prefix(trial_steps)}{name}"
    folder.mkdir(parents=True, exist_ok=True)
    data = dataset(samples, noise=noise)
    user = replace(BASELINE, name="user")

    def job(seed: int) -> Job:
        def run() -> dict[str, Any]:
            inspect = trialler(data, family, seed, fixed, trial)
            record = train_run(data, user, family=family, epochs=epochs, seed=seed, evals=8, clock=cpu_clock,
                               inspect=inspect, inspect_at=POINTS)  # fmt: skip
            record.update(suite=name, samples=samples, noise=noise, fixed_costs=fixed, time=time.time())
            return record

        return Job(("user", seed), run)

    def line(r: dict[str, Any]) -> None:
        said = "; ".join(f"{i['at']:.2f}: {_named(i['recommendation'])}" for i in r["inspections"])
        print(f"{name} seed={r['seed']} acc={r['accuracy']:.4f} {said}")

    run_loop((job(seed) for seed in seeds), folder / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    settings = {"points": POINTS, "keeps": KEEPS, "steps": STEPS, "trial": trial, "fixed_costs": fixed}
    (folder / "machine.json").write_text(json.dumps({**machine(), "suite": name, **info, **settings}, indent=2))


def _named(recommendation: str) -> str:
    """The option a recommendation names: ``"whole batches"``, or the measured option (e.g. ``"top-k keep=0.25"``)."""
    if recommendation.startswith("train on whole batches"):
        return "whole batches"
    if recommendation.startswith("measured: "):
        return recommendation.removeprefix("measured: ").split(" at ", 1)[0]
    return "no trial"


def _whole_run(measured: Path, name: str) -> dict[str, Any]:
    """The fixed arms' whole-run measurement of the suite (top-k and random at keep 0.25): speed-up on the
    seed-mean curve and the seeds that reached the user's accuracy."""
    path = measured / "auto" / WHOLE_RUN / "summary.json"
    if not path.exists():
        return {}
    arms = json.loads(path.read_text())["suites"].get(name, {}).get("arms", {})
    return {arm: (arms[arm].get("speedup_mean_curve"), arms[arm].get("reached")) for arm in ("topk-0.25", "random-0.25")
            if arm in arms}  # fmt: skip


def _agrees(named: str, whole: dict[str, Any]) -> bool | None:
    """Whether a recommendation agrees with the whole-run record of top-k 0.25: where it reached the user's accuracy
    on every seed, naming top-k (at any keep; keep 0.5 measured a win there too) agrees; where it never did, naming
    top-k 0.25 disagrees, naming no top-k agrees, and top-k at another keep has no whole-run record here (None, as
    for a mixed record)."""
    speed, reached = whole.get("topk-0.25", (None, None))
    if reached == 3 and speed is not None and speed > 1:
        return named.startswith("top-k")
    if reached == 0:
        if named.startswith("top-k"):
            return False if named == "top-k keep=0.25" else None
        return True
    return None


def _times(value: float | None) -> str:
    """A speed-up as the tables print it: "-" not measured, "never" (0.0), "inf" (plain made no progress)."""
    return "-" if value is None else {0.0: "never", math.inf: "inf"}.get(value, f"{value:.2f}x")


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def trial_report(out: Path, measured: Path, trial_steps: int | None = None) -> str:
    """``out/<prefix>report/table.md``: per suite and point, the seed-mean measured speed-up of each option in the
    branch trial, the options recommended, and the whole-run measurement beside; returns the text."""
    lines = [
        "# `advise`'s branch trial along the user's run (issue 28)",
        "",
        "Speed-up in the trial: whole batches' seconds to the lower of the two final probe accuracies over the "
        "option's (> 1 pays; `never`: it ended no higher than it started), seed means of the finite values. "
        "Recommended: what `advise` named at that point, per seed. Whole run: the auto benchmark's fixed arms, "
        "speed-up to the user's accuracy on the seed-mean curve (seeds that reached it).",
        "",
    ]
    for name in SUITES:
        path = out / f"{prefix(trial_steps)}{name}" / "runs.jsonl"
        if not path.exists():
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        whole = _whole_run(measured, name)
        said = ", ".join(f"{arm} {_times(s)} ({n}/3)" for arm, (s, n) in whole.items()) or "not recorded"
        options = [row["option"] for row in records[0]["inspections"][0]["trial"]]
        agree: list[tuple[float, bool | None]] = []
        lines += [f"## {name} (whole run: {said})", "",
                  "| point | " + " | ".join(options[1:]) + " | recommended (per seed) |",
                  "| --- | " + " | ".join("---" for _ in options[1:]) + " | --- |"]  # fmt: skip
        for index, point in enumerate(POINTS):
            found = [r["inspections"][index] for r in records if len(r["inspections"]) > index]
            if not found:
                continue
            cells = []
            for option in options[1:]:
                rows = [next(row for row in got["trial"] if row["option"] == option) for got in found]
                behind = sum(row["difference"] < -row["se"] for row in rows)
                speed, points = _mean([row["speedup"] for row in rows]), _mean([row["difference"] for row in rows])
                cells.append(f"{_times(speed)} ({points * 100:+.2f} pts; behind {behind})")
            named = [_named(got["recommendation"]) for got in found]
            lines.append(f"| {point:.2f} | " + " | ".join(cells) + f" | {', '.join(named)} |")
            agree += [(point, _agrees(name, whole)) for name in named]
        known = [a for _, a in agree if a is not None]
        early = [a for point, a in agree if a is not None and point in EARLY]
        lines += [
            "",
            "Recommendations that agree with the whole run (top-k named where top-k 0.25 reached the user's accuracy "
            "on every seed; top-k 0.25 not named where it never did; a top-k keep without a whole-run record not "
            f"judged): {sum(known)} of {len(known)} judged at every point, {sum(early)} of {len(early)} at the start "
            "and 25% (the points a whole run that selects from its start speaks for; later, the question is whether "
            "a switch at that point pays, which no whole-run record here measured).",
            "",
        ]
    text = "\n".join(lines)
    folder = out / f"{prefix(trial_steps)}report"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "table.md").write_text(text)
    print(text)
    return text
