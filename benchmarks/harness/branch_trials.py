"""``advise``'s branch trial along a run (issue 28): the ``inspect`` hook that calls it on the live model and
optimizer, and the table that reads its records against whole-run measurements. Shared by the calibration
benchmark's trial stage (the MNIST-1D suites) and the digits suite's.

The hook: at each inspected point, ``advise(..., optimizer=<the live optimizer>, trial_steps=..., probe=...)`` on a
loader over the training set without its last ``probe_samples`` samples (in an order of the advisor's own), the probe
being those samples: no branch trains on them (the user's run does, under every branch alike). Its seconds are
excluded from the run's (``train_run``'s inspect contract). The settings below (points, keeps, timed steps, the
advisor's order, the fixed cost table, the split) are also the calibration benchmark's priced stage's.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.nn.functional as F

from benchmarks.harness._sb import Candidates, CostTable, Measurement, Training, advise
from benchmarks.harness.data import ShuffledBatches, inputs_targets

POINTS = (0.0, 0.25, 0.5, 0.75)  # shares of the run at which advise is called
EARLY = (0.0, 0.25)  # the points a whole run's record speaks for: a run that selects from (about) its start
KEEPS = (0.25, 0.5)
STEPS = 16  # timed loader batches before the trial (advise's priced part)
TRIAL = 1024  # loader batches per option (advise's default)
ORDER = 7_919  # the advisor reads the training set in an order of its own
FIXED = CostTable.forward_equivalents()  # --fixed-costs: a scored sample costs 1, a trained one 3


def trialler(
    fields: tuple[Any, ...], batch: int, seed: int, *, fixed: bool, trial: int, probe_samples: int
) -> Callable[[Any, float, Any], dict[str, Any]]:
    """``inspect(model, progress, optimizer)`` for ``train_run``: ``advise`` with a branch trial, as a record.

    Args:
        fields: the training set's (inputs, labels) tensors (a noisy set's flipped labels).
        batch: the user's batch size.
        seed: the run's seed (the probe's order; the advisor's order is ``seed + ORDER``).
        fixed: price with :data:`FIXED` instead of timing (tests).
        trial: loader batches per option.
        probe_samples: the last samples of ``fields``, held out of the advisor's loader as the probe.
    """
    calls = [0]
    probe = list(ShuffledBatches(tuple(t[-probe_samples:] for t in fields), batch, seed))

    def inspect(model: Any, progress: float, optimizer: Any) -> dict[str, Any]:
        loader = ShuffledBatches(tuple(t[:-probe_samples] for t in fields), batch, seed + ORDER)
        loader.set_epoch(calls[0])
        calls[0] += 1
        started = time.perf_counter()
        steps = min(STEPS, max(4, len(loader) // 4))
        advice = advise(
            loader, model, F.cross_entropy, split=inputs_targets, training=Training(optimizer=optimizer),
            candidates=Candidates(keeps=KEEPS),
            measurement=Measurement(steps=steps, trial_steps=trial, probe=probe, costs=FIXED if fixed else None),
        )  # fmt: skip
        rows = [{k: v for k, v in row.items() if k != "curve"}
                | {"curve": list(zip(row["curve"].seconds, row["curve"].quality, strict=True))}
                for row in advice.trial]  # fmt: skip
        predicted = {row["option"]: [row["low"], row["high"]] for row in advice.rows if not row["cache"]}
        return {"trial": rows, "predicted": predicted, "recommendation": advice.recommendation,
                "trial_steps": advice.trial_steps, "lr": optimizer.param_groups[0]["lr"],
                "advise_seconds": time.perf_counter() - started}  # fmt: skip

    return inspect


def trial_runs(
    out: Path,
    name: str,
    data: Any,
    user: Any,
    seeds: tuple[int, ...],
    *,
    batch: int,
    trial: int,
    fixed: bool,
    probe_samples: int,
    points: tuple[float, ...],
    settings: dict[str, Any],
    record: dict[str, Any],
    **run: Any,
) -> None:
    """The user's run of suite ``name`` per seed (``train_run`` with ``run``'s options, thread CPU seconds) with
    ``advise``'s branch trial at ``points`` (:func:`trialler` on the training set's first two fields), appended to
    ``out/runs.jsonl`` by the run loop (a rerun continues), each record with ``record``'s fields; ``out/machine.json``
    with ``settings``."""
    from .records import machine
    from .runs import Job, run_loop
    from .train import train_run

    def job(seed: int) -> Job:
        def train() -> dict[str, Any]:
            inspect = trialler(data.fields()[:2], batch, seed, fixed=fixed, trial=trial, probe_samples=probe_samples)
            got = train_run(data, user, seed=seed, evals=8, clock=time.thread_time, inspect=inspect, inspect_at=points,
                            **run)  # fmt: skip
            return {**got, "suite": name, **record, "time": time.time(), "load": os.getloadavg()}

        return Job(("user", seed), train)

    def line(r: dict[str, Any]) -> None:
        said = "; ".join(f"{i['at']:.2f}: {named(i['recommendation'])}" for i in r["inspections"])
        print(f"{name} seed={r['seed']} acc={r['accuracy']:.4f} {said}", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    run_loop((job(seed) for seed in seeds), out / "runs.jsonl", lambda r: (r["arm"], r["seed"]), log=line)
    (out / "machine.json").write_text(json.dumps({**machine(), "suite": name, **settings}, indent=2))


def named(recommendation: str) -> str:
    """The option a recommendation names: ``"whole batches"``, or the measured option (e.g. ``"top-k keep=0.25"``)."""
    if recommendation.startswith("train on whole batches"):
        return "whole batches"
    if recommendation.startswith("measured: "):
        return recommendation.removeprefix("measured: ").split(" at ", 1)[0]
    return "no trial"


def _won(record: tuple[float | None, int, int] | None) -> bool | None:
    """A whole-run record (speed-up, seeds that reached the user's accuracy, seeds): True where every seed reached it
    with a speed-up above 1, False where none did or the speed-up is at most 1, None where it is mixed or absent."""
    if record is None:
        return None
    speed, reached, seeds = record
    if seeds and reached == seeds and speed is not None:
        return speed > 1
    return False if reached == 0 else None


def agrees(option: str, whole: dict[str, tuple[float | None, int, int]]) -> bool | None:
    """Whether a recommendation agrees with the whole runs (``whole``: per arm, (speed-up, seeds that reached the
    user's accuracy, seeds); ``"topk-0.25"``, and ``"small-batch"`` where the small-batch control was measured).
    Top-k named (at any keep; keep 0.5 measured a win where 0.25 did): agrees where top-k 0.25 won; where it never
    reached the user's accuracy, top-k 0.25 disagrees and another keep is not judged (no whole-run record of it).
    The smaller batch named: agrees where the small-batch control won, disagrees where it did not, not judged
    without a record. Whole batches named: agrees where neither won (None where a record is missing or mixed)."""
    topk, small = _won(whole.get("topk-0.25")), _won(whole.get("small-batch"))
    if option.startswith("top-k"):
        if topk is False:
            return False if option == "top-k keep=0.25" else None
        return topk
    if option.startswith("smaller batch"):
        return small
    if topk or small:
        return False
    return True if topk is False and small is not True else None


def times(value: float | None) -> str:
    """A speed-up as the tables print it: "-" not measured, "never" (0.0), "inf" (plain made no progress)."""
    return "-" if value is None else {0.0: "never", math.inf: "inf"}.get(value, f"{value:.2f}x")


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


HEADER = (
    "Speed-up in the trial: whole batches' seconds to the lower of the two final probe accuracies over the option's "
    "(> 1 pays; `never`: it ended no higher than it started), seed means of the finite values; pts: the option's "
    "final probe accuracy minus whole batches' at equal loader batches; behind: seeds where it ended behind by more "
    "than one paired se. Recommended: what `advise` named at that point, per seed. Whole run: the fixed arms' "
    "speed-up to the user's accuracy (seeds that reached it, of the seeds)."
)


def suite_table(name: str, records: list[dict[str, Any]], whole: dict[str, tuple[float | None, int, int]]) -> list[str]:
    """One suite's section of the table: per point, each option's seed-mean measured speed-up and the options
    named, and how many recommendations agree with the whole run (:func:`agrees`)."""
    said = ", ".join(f"{arm} {times(s)} ({n}/{k})" for arm, (s, n, k) in whole.items()) or "not recorded"
    options = [row["option"] for row in records[0]["inspections"][0]["trial"]]
    lines = [f"## {name} (whole run: {said})", "",
             "| point | " + " | ".join(options[1:]) + " | recommended (per seed) |",
             "| --- | " + " | ".join("---" for _ in options[1:]) + " | --- |"]  # fmt: skip
    agree: list[tuple[float, bool | None]] = []
    for index, point in enumerate(POINTS):
        found = [r["inspections"][index] for r in records if len(r["inspections"]) > index]
        if not found:
            continue
        cells = []
        for option in options[1:]:
            rows = [next(row for row in got["trial"] if row["option"] == option) for got in found]
            behind = sum(row["difference"] < -row["se"] for row in rows)
            speed, pts = _mean([row["speedup"] for row in rows]), _mean([row["difference"] for row in rows])
            cells.append(f"{times(speed)} ({pts * 100:+.2f} pts; behind {behind})")
        said_here = [named(got["recommendation"]) for got in found]
        lines.append(f"| {point:.2f} | " + " | ".join(cells) + f" | {', '.join(said_here)} |")
        agree += [(point, agrees(option, whole)) for option in said_here]
    known = [a for _, a in agree if a is not None]
    early = [a for point, a in agree if a is not None and point in EARLY]
    return [*lines, "",
            "Recommendations that agree with the whole run (`agrees`: top-k named where top-k 0.25 won on every seed, "
            "top-k 0.25 not named where it never reached the user's accuracy, the smaller batch named where the "
            "small-batch control won, whole batches where neither did; an option without a whole-run record not "
            f"judged): {sum(known)} of {len(known)} judged at every point, {sum(early)} of {len(early)} at the start "
            "and 25% (the points a whole run that selects from its start speaks for; later, the question is whether "
            "a switch at that point pays, which no whole-run record here measured).", ""]  # fmt: skip
