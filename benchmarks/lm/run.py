"""Selection for language-model training: a byte-level causal transformer on the Python standard library's source.

One command runs everything (about an hour on 2 CPU cores; the recorded run's time is in benchmarks/README.md):

    python -m benchmarks.lm all --jobs 2            # tune, both regimes, 3 seeds, report -> benchmarks/results/lm
    python -m benchmarks.lm all --smoke --out /tmp/lm   # seconds; what CI runs

Stages, also runnable alone (``--worker I/N`` runs every N-th run from the I-th; ``all`` starts N such workers):

    python -m benchmarks.lm tune [--worker I/N]     # the baseline's (batch, LR) grid per regime, widened at an edge
    python -m benchmarks.lm run  [--worker I/N]     # every arm x budget x seed of both regimes
    python -m benchmarks.lm report                  # tables, targets, plot

Regimes (corpus and model in ``_lm_data.py``, arms in ``_lm_arms.py``, the run in ``_lm_run.py``):

- ``single-pass`` (pretraining-like): every run reads a seeded permutation of all training chunks and never sees a
  chunk twice; an arm that scores more reads further into it.
- ``repeating`` (fine-tuning-like): a fixed subset of ``SUBSET`` training chunks, which the tuned baseline reads
  about 8 times at the reference budget, so the loss cache and pruning can reuse losses.

Tuning: the baseline's (batch, LR) grid runs at equal seconds (``REFERENCE_SECONDS`` of CPU time each, the LR
annealed over them), because per-step costs make small batches dear in seconds: at equal FE the smallest batch
always won (batch 1 at 1.82 nats/byte against 1.86 at batch 4), at 1.7x the seconds. The reference budget is the
tuned run's FE; every arm runs at 0.4x and 1.0x of it. Runs are interleaved (per seed and budget, every arm in turn,
rotating) and appended to ``<out>/<stage>.jsonl`` as they end, so a rerun continues where a crash stopped. Torch
runs on one thread with the allocator pinned (``_timing.py``); seconds are thread CPU time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ._harness import append_jsonl, machine, read_jsonl
from ._lm_arms import LMArm, auto_arms, repeating_arms, selection_arms
from ._lm_data import load_corpus
from ._lm_report import tuned
from ._lm_run import train_run
from ._timing import setup

RESULTS = Path(__file__).resolve().parent / "results" / "lm"
REFERENCE_SECONDS = 30.0  # CPU seconds of each tuning run: about 8,000 sequences (1 MiB of text) at batch 4-8
SUBSET = 1024  # chunks of the repeating regime (128 KiB); the tuned baseline reads it about 8 times
FRACTIONS = (0.4, 1.0)
SEEDS = (0, 1, 2)
IRREDUCIBLE_SEQUENCES = 2048  # hold-out chunks the irreducible model trains on, once each
GRID = {"batch": (2, 4, 8), "lr": (4e-3, 8e-3, 1.6e-2)}
REGIMES = ("single-pass", "repeating")


@dataclass
class Plan:
    """Sizes of a benchmark run (the full one, or the smoke test's)."""

    reference_seconds: float = REFERENCE_SECONDS
    subset: int = SUBSET
    fractions: tuple[float, ...] = FRACTIONS
    seeds: tuple[int, ...] = SEEDS
    irreducible_sequences: int = IRREDUCIBLE_SEQUENCES
    grid_batches: tuple[int, ...] = GRID["batch"]
    grid_lrs: tuple[float, ...] = GRID["lr"]
    widen: int = 2  # grid extensions allowed per regime when the best point is at an edge
    validation: int = 512  # validation sequences (evenly spaced over the validation files)
    arm_names: tuple[str, ...] | None = None  # None: every arm
    tune_fe: float | None = None  # tune at this FE instead of at equal seconds: no clock decides (the smoke run)


# The smoke run tunes at equal FE (240 FE: 20 steps at batch 4), so that its tuning, and with it every budget, is
# the same on any machine and under any load: its tests assert on what it trains, never on what a clock said.
SMOKE = Plan(0.3, 32, (0.5, 1.0), (0,), 32, (4, 8), (4e-3,), 0, 32, tune_fe=240.0)
SMOKE_ARMS = ("baseline", "topk-0.5-shrink", "random-0.5-shrink", "reducible-0.5-shrink", "cache-s2-observe-0.5-shrink")
SMOKE_ARMS += ("prune-infobatch",)


def arms_of(regime: str, plan: Plan) -> list[LMArm]:
    arms = [LMArm("baseline"), *selection_arms(), *auto_arms(), *(repeating_arms() if regime == "repeating" else [])]
    names = plan.arm_names
    return [arm for arm in arms if names is None or arm.name in names]


class Data:
    """The corpus and each regime's pool, loaded once per process."""

    def __init__(self, plan: Plan) -> None:
        self.corpus = load_corpus(validation=plan.validation)
        subset = self.corpus.subset(plan.subset)
        self.pools = {
            "single-pass": (self.corpus.train, self.corpus.noisy),
            "repeating": (self.corpus.train[subset], self.corpus.noisy[subset]),
        }

    def run(self, regime: str, arm: LMArm, recipe: dict, fraction: float, seed: int, plan: Plan) -> dict:
        """Train ``arm`` at ``fraction`` of the tuned baseline's FE (``recipe["fe"]``), or for the reference
        seconds when ``recipe`` has no FE yet (the tuning grid)."""
        chunks, noisy = self.pools[regime]
        reference_fe = recipe.get("fe", plan.tune_fe or 0.0)
        record = train_run(
            chunks,
            noisy,
            self.corpus.validation,
            arm,
            recipe=recipe,
            budget_fe=fraction * reference_fe,
            epochs=fraction * reference_fe / 3.0 / len(chunks),
            seed=seed,
            holdout=self.corpus.holdout,
            irreducible_sequences=plan.irreducible_sequences,
            budget_seconds=None if reference_fe else fraction * plan.reference_seconds,  # the grid, at equal seconds
        )
        return {**record, "regime": regime, "fraction": fraction}


def _mine(index: int, worker: tuple[int, int]) -> bool:
    return index % worker[1] == worker[0]


# ------------------------------------------------------------------ tuning
def grid_arms(batches: tuple[int, ...], lrs: tuple[float, ...]) -> list[LMArm]:
    return [LMArm(f"tune b={b} lr={lr:g}", batch=b, lr=lr) for b in batches for lr in lrs]


def widened(best: dict) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
    """The grid grown by one point past the edge where the best point sits, or None when it is inside."""
    batches, lrs = list(best["batches"]), list(best["lrs"])
    grown = False
    if best["batch"] == batches[0] and batches[0] > 1:
        batches.insert(0, batches[0] // 2)
        grown = True
    elif best["batch"] == batches[-1] and len(batches) > 1:
        batches.append(batches[-1] * 2)
        grown = True
    if best["lr"] == lrs[0] and len(lrs) > 1:
        lrs.insert(0, lrs[0] / 2)
        grown = True
    elif best["lr"] == lrs[-1] and len(lrs) > 1:
        lrs.append(lrs[-1] * 2)
        grown = True
    return (tuple(batches), tuple(lrs)) if grown else None


def tune(data: Data, plan: Plan, out: Path, worker: tuple[int, int], round_: int) -> None:
    """Run the grid points of tuning round ``round_`` (0: the initial grid; k: k-th widening) not yet run."""
    path = out / "tune.jsonl"
    records = read_jsonl(path)
    index = -1
    for regime in REGIMES:
        if round_ == 0:
            batches, lrs = plan.grid_batches, plan.grid_lrs
        else:
            best = tuned(records, regime)
            grown = widened(best) if best else None
            if grown is None:
                continue
            batches, lrs = grown
        done = {(r["regime"], r["config"]["batch"], r["config"]["lr"]) for r in records}
        for arm in grid_arms(batches, lrs):
            index += 1
            if not _mine(index, worker) or (regime, arm.batch, arm.lr) in done:
                continue
            record = data.run(regime, arm, {}, 1.0, plan.seeds[0], plan)
            append_jsonl(path, {**record, "round": round_})
            print(f"tune {regime:<11} b={arm.batch:<3} lr={arm.lr:<7g} val={record['val_loss']:.4f}", flush=True)


# ------------------------------------------------------------------ the suite
def run(data: Data, plan: Plan, out: Path, worker: tuple[int, int]) -> None:
    """Every (regime, seed, budget, arm) not yet in ``runs.jsonl``, interleaved and rotating."""
    best = {regime: tuned(read_jsonl(out / "tune.jsonl"), regime) for regime in REGIMES}
    path = out / "runs.jsonl"
    done = {(r["regime"], r["arm"], r["fraction"], r["seed"]) for r in read_jsonl(path)}
    index = -1
    for seed in plan.seeds:
        for level, fraction in enumerate(plan.fractions):
            for regime in REGIMES:
                arms = arms_of(regime, plan)
                turn = (level + seed) % len(arms)
                for arm in arms[turn:] + arms[:turn]:
                    index += 1
                    if not _mine(index, worker) or (regime, arm.name, fraction, seed) in done:
                        continue
                    record = data.run(regime, arm, best[regime], fraction, seed, plan)
                    append_jsonl(path, record)
                    print(
                        f"{regime:<11} seed={seed} x{fraction:<4} {arm.name:<30} val={record['val_loss']:.4f} "
                        f"fe={record['fe'] / best[regime]['fe']:.2f} s={record['seconds']:.1f} "
                        f"noisy={record['noisy_share']:.3f}",
                        flush=True,
                    )


def spawn(stage: list[str], jobs: int, common: list[str]) -> None:
    """Run ``stage`` in ``jobs`` worker processes side by side and wait for all; raise if one fails."""
    procs = [
        subprocess.Popen([sys.executable, "-m", "benchmarks.lm", *stage, "--worker", f"{i}/{jobs}", *common])
        for i in range(jobs)
    ]
    codes = [proc.wait() for proc in procs]
    if any(codes):
        raise SystemExit(f"benchmarks.lm {' '.join(stage)}: a worker failed (exit codes {codes})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["all", "tune", "run", "report"])
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default benchmarks/results/lm)")
    parser.add_argument("--smoke", action="store_true", help="seconds-long: tiny budgets, one seed, a few arms")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for 'all' (default 2)")
    parser.add_argument("--worker", default="0/1", help="I/N: run every N-th run from the I-th")
    parser.add_argument("--round", type=int, default=0, help="tuning round (0: the grid; k: k-th widening)")
    parser.add_argument("--arms", nargs="*", help="run only these arms (default: every arm; the smoke run's few)")
    parser.add_argument("--fractions", type=float, nargs="*", help="budgets as fractions of the tuned FE")
    args = parser.parse_args(argv)
    plan = replace(SMOKE, arm_names=SMOKE_ARMS) if args.smoke else Plan()
    if args.arms:
        plan = replace(plan, arm_names=tuple(args.arms))
    if args.fractions:
        plan = replace(plan, fractions=tuple(args.fractions))
    common = ["--out", str(args.out), *(["--smoke"] if args.smoke else [])]
    common += [*(["--arms", *args.arms] if args.arms else []), *(["--fractions"] if args.fractions else [])]
    common += [str(f) for f in args.fractions or []]
    if args.stage == "all":
        started = time.time()
        for round_ in range(plan.widen + 1):
            spawn(["tune", "--round", str(round_)], args.jobs, common)
        spawn(["run"], args.jobs, common)
        from ._lm_report import report

        report(args.out, wall_seconds=time.time() - started)
        return 0
    if args.stage == "report":
        from ._lm_report import report

        report(args.out)
        return 0
    info = setup()
    worker = tuple(int(v) for v in args.worker.split("/"))
    data = Data(plan)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {**machine(), **info, "corpus": data.corpus.description, "plan": plan.__dict__}
    (args.out / "machine.json").write_text(json.dumps(meta, indent=1, default=str))
    if args.stage == "tune":
        tune(data, plan, args.out, worker, args.round)
    else:
        run(data, plan, args.out, worker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
