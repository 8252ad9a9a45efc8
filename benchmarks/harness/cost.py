"""The one cost model of the benchmarks: seconds priced from interleaved step timings, and the calibrated model.

- :func:`step_kind` and :func:`suite_arm_seconds`: the time-to-accuracy suites, priced from the throughput
  benchmark's per-loader-batch timings (``results/throughput/main/summary.json``);
- :func:`pruning_run_seconds`: the pruning benchmark's runs, priced from its per-step timings
  (``results/pruning/timing/summary.json``);
- the calibrated cost model (:class:`Costs`, :func:`calibrate`, :func:`costs_from`, :func:`sb_step_seconds`) is
  ``examples/costmodel.py``'s, imported from there (one definition, which the example prints with);
- sbdata's own cost model (:class:`CostTable`, its pricing of a selection step) comes through ``_sb.py``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from examples.costmodel import Costs, calibrate, costs_from, sb_step_seconds

from ._sb import CostTable

if TYPE_CHECKING:
    from .arms import Arm

__all__ = [
    "FE",
    "CostTable",
    "Costs",
    "calibrate",
    "cost_per_epoch",
    "costs_from",
    "priced",
    "pruning_run_seconds",
    "sb_step_seconds",
    "scored_share",
    "selecting",
    "step_kind",
    "suite_arm_seconds",
]


FE = CostTable.forward_equivalents()  # sbdata's machine-free cost model: a scored sample costs 1, a trained one 3


def priced(scored: float, trained: float, *, upfront: float = 0.0, costs: CostTable = FE) -> float:
    """The cost of scoring ``scored`` samples and training ``trained`` (sums over many calls), plus ``upfront``, priced
    by sbdata's :class:`CostTable` (forward-equivalents by default; per-call fixed costs do not apply to such sums).

    The one per-sample pricing of the benchmarks: a run's FE (``train.train_run``, ``lm_train.train_run``) and an
    arm's expected FE per epoch (:func:`cost_per_epoch`)."""
    return upfront + costs.score(scored) + costs.train(trained)


def selecting(arm: Arm) -> float:
    """Share of an arm's loader batches that are selection steps (its schedule's window and interrupts)."""
    if arm.policy is None:
        return 0.0
    return 1.0 if arm.start is None else (arm.end - arm.start) * (1 - 1 / arm.interrupt if arm.interrupt else 1)


def scored_share(arm: Arm) -> float:
    """Expected share of an SB step's samples that go through the scoring forward: 1 without a cache; with one,
    about one epoch in ``staleness + 1``, less what ``observe`` refreshes (roughly the kept share)."""
    if arm.staleness is None:
        return 1.0
    return (1 - arm.keep if arm.observe else 1.0) / (arm.staleness + 1)


def cost_per_epoch(arm: Arm) -> float:
    """Expected FE per epoch relative to the baseline's 3 per sample (scoring 1, training 3 per kept sample)."""
    if arm.policy is None:
        return 1.0
    selecting_ = selecting(arm)
    extra = 1 if arm.policy == "reducible" else 0
    per_sb = (
        priced(scored_share(arm) + extra, arm.keep)
        / FE.train(1)
        * (1 - arm.holdout if arm.policy == "reducible" else 1)
    )
    return (1 - selecting_) + selecting_ * per_sb


def step_kind(arm: Arm) -> str:
    """What one loader batch of an arm costs, whatever its schedule: the key of the timing table."""
    if arm.policy is None:
        return f"plain batch {'keep*B ' + str(arm.keep) if arm.small_batch else 'B'}"
    layout = "fixed" if arm.pooled else "shrink"
    policy = f"reducible/{arm.base}" if arm.policy == "reducible" else arm.policy
    cache = "" if arm.staleness is None else f" cache s={arm.staleness}{' observe' if arm.observe else ''}"
    return f"{policy} keep={arm.keep} {layout} {arm.score_mode}{cache}"


def suite_arm_seconds(arm: Arm, timing: dict[str, dict], train_samples: int, batch: int) -> tuple[float, float]:
    """(seconds per epoch, seconds up front) of ``arm`` from interleaved per-loader-batch timings (throughput).

    An epoch mixes plain steps at batch B and the arm's selection steps in the share its schedule gives; the
    reducible arm trains on the data left after its hold-out and first trains its irreducible model plainly.
    """
    plain = timing["plain batch B"]["seconds_per_loader_batch"]
    kind = timing[step_kind(arm)]
    if arm.policy is None:
        return -(-train_samples // kind["loader_batch"]) * kind["seconds_per_loader_batch"], 0.0
    upfront = 0.0
    if arm.policy == "reducible":
        held = int(arm.holdout * train_samples)
        upfront = arm.il_epochs * -(-held // batch) * plain
        train_samples -= held
    share = selecting(arm)
    per_batch = (1 - share) * plain + share * kind["seconds_per_loader_batch"]
    return -(-train_samples // batch) * per_batch, upfront


def pruning_run_seconds(record: dict[str, Any], timing_: dict[str, Any], n: int) -> float:
    """A pruning benchmark run's seconds from the interleaved step times of its ``timing`` stage: its loaded batches at
    the plain, pruning or SB step's seconds, plus the sampler's decisions."""
    cfg = record["config"]
    b = cfg["batch"]
    steps = timing_["families"][record["family"]]
    loaded = record.get("samples_loaded") or [n] * record["epochs"]
    batches = sum(math.ceil(count / b) for count in loaded)
    decisions = sum(record.get("decision_seconds") or [])
    if cfg.get("sb_keep") is None:
        kind = f"prune b={b}" if cfg.get("prune") else f"plain b={b}"
        return batches * steps[kind]["seconds_per_step"] + decisions
    scored = record["samples_scored"] / max(1, sum(loaded))
    reuse, stale = steps[f"sb-reuse b={b}"]["seconds_per_step"], steps[f"sb-stale b={b}"]["seconds_per_step"]
    return batches * (reuse + scored * (stale - reuse)) + decisions
