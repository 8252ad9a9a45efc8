"""The language-model suite, shared by the language-model benchmark (``python -m benchmarks lm``) and the auto
benchmark's LM arms (``python -m benchmarks auto lm``): its plan, data, tuning grid and runs.

Corpus and model in :mod:`.lm`, arms in :mod:`.lm_arms`, the run in :mod:`.lm_train`. The regimes (``single-pass``,
``repeating`` on ``SUBSET`` chunks), the tuning at equal seconds (``REFERENCE_SECONDS`` each) and the budgets (0.4x
and 1.0x the tuned run's FE): ``benchmarks/lm/README.md``. Runs are interleaved and appended to ``<out>/<stage>.jsonl``
as they end (:func:`~.runs.run_loop`), so a rerun continues where a crash stopped; seconds are thread CPU time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .lm import Corpus, load_corpus
from .lm_arms import LMArm, auto_arms, repeating_arms, selection_arms
from .lm_train import train_run
from .records import machine, read_jsonl
from .runs import Job, run_loop
from .timing import rotated, setup

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
# the same on any machine and under any load: its tests assert on what it trains, never on what a clock said. Its
# validation set is 8 sequences: every curve point is a full validation pass, the most of a smoke run's time.
SMOKE = Plan(0.3, 32, (0.5, 1.0), (0,), 32, (4, 8), (4e-3,), 0, 8, tune_fe=240.0)
SMOKE_ARMS = ("baseline", "topk-0.5-shrink", "random-0.5-shrink", "reducible-0.5-shrink", "cache-s2-observe-0.5-shrink")
SMOKE_ARMS += ("prune-infobatch",)


def arms_of(regime: str, plan: Plan) -> list[LMArm]:
    arms = [LMArm("baseline"), *selection_arms(), *auto_arms(), *(repeating_arms() if regime == "repeating" else [])]
    names = plan.arm_names
    return [arm for arm in arms if names is None or arm.name in names]


_CORPORA: dict[int, Corpus] = {}  # by validation sequences: the corpus (its zlib ratios take seconds), once per process


class Data:
    """The corpus and each regime's pool, loaded once per process."""

    def __init__(self, plan: Plan) -> None:
        if plan.validation not in _CORPORA:  # a process that runs several stages (the smoke runs) reads it once
            _CORPORA[plan.validation] = load_corpus(validation=plan.validation)
        self.corpus = _CORPORA[plan.validation]
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

    def job(regime: str, arm: LMArm) -> Job:
        def train() -> dict:
            return {**data.run(regime, arm, {}, 1.0, plan.seeds[0], plan), "round": round_}

        return Job((regime, arm.batch, arm.lr), train)

    def jobs() -> Iterator[Job]:
        for regime in REGIMES:
            if round_ == 0:
                batches, lrs = plan.grid_batches, plan.grid_lrs
            else:
                best = tuned(records, regime)
                grown = widened(best) if best else None
                if grown is None:
                    continue
                batches, lrs = grown
            for arm in grid_arms(batches, lrs):
                yield job(regime, arm)

    def line(r: dict) -> None:
        cfg = r["config"]
        print(f"tune {r['regime']:<11} b={cfg['batch']:<3} lr={cfg['lr']:<7g} val={r['val_loss']:.4f}", flush=True)

    run_loop(jobs(), path, lambda r: (r["regime"], r["config"]["batch"], r["config"]["lr"]), worker=worker, log=line)


# ------------------------------------------------------------------ the suite
def run(data: Data, plan: Plan, out: Path, worker: tuple[int, int]) -> None:
    """Every (regime, seed, budget, arm) not yet in ``runs.jsonl``, interleaved and rotating."""
    best = {regime: tuned(read_jsonl(out / "tune.jsonl"), regime) for regime in REGIMES}

    def job(regime: str, arm: LMArm, fraction: float, seed: int) -> Job:
        return Job(
            (regime, arm.name, fraction, seed), lambda: data.run(regime, arm, best[regime], fraction, seed, plan)
        )

    def jobs() -> Iterator[Job]:
        for seed in plan.seeds:
            for level, fraction in enumerate(plan.fractions):
                for regime in REGIMES:
                    for arm in rotated(arms_of(regime, plan), level + seed):
                        yield job(regime, arm, fraction, seed)

    def line(r: dict) -> None:
        print(
            f"{r['regime']:<11} seed={r['seed']} x{r['fraction']:<4} {r['arm']:<30} val={r['val_loss']:.4f} "
            f"fe={r['fe'] / best[r['regime']]['fe']:.2f} s={r['seconds']:.1f} noisy={r['noisy_share']:.3f}",
            flush=True,
        )

    run_loop(
        jobs(), out / "runs.jsonl", lambda r: (r["regime"], r["arm"], r["fraction"], r["seed"]), worker=worker, log=line
    )


def stage(name: str, plan: Plan, out: Path, worker: tuple[int, int] = (0, 1), round_: int = 0) -> None:
    """One stage of the language-model suite in this process: ``"tune"`` (round ``round_`` of the grid) or ``"run"``
    (every arm); what the language-model and the auto benchmarks call (a stage per worker process)."""
    info = setup()
    data = Data(plan)
    out.mkdir(parents=True, exist_ok=True)
    meta = {**machine(), **info, "corpus": data.corpus.description, "plan": plan.__dict__}
    (out / "machine.json").write_text(json.dumps(meta, indent=1, default=str))
    if name == "tune":
        tune(data, plan, out, worker, round_)
    else:
        run(data, plan, out, worker)


def tuned(records: list[dict[str, Any]], regime: str) -> dict[str, Any] | None:
    """The grid's best (batch, LR) for ``regime`` by final validation loss, its FE (the reference budget), and the
    grid it came from; None before any grid point of ``regime`` has run."""
    rows = [r for r in records if r["regime"] == regime]
    if not rows:
        return None
    best = min(rows, key=lambda r: r["val_loss"])
    batches = sorted({r["config"]["batch"] for r in rows})
    lrs = sorted({r["config"]["lr"] for r in rows})
    config = best["config"]
    return {"batch": config["batch"], "lr": config["lr"], "fe": best["fe"], "batches": batches, "lrs": lrs}
