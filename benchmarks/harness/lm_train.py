"""One run of the language-model benchmark: train an arm to its budget and record validation loss against compute
and seconds.

Budgets are in forward-equivalents (FE) of sequences, priced by ``cost.priced`` (``ReducibleSelect``'s irreducible
model adds its relative FLOPs per scored sequence, its training up front). Arms metered by FE anneal their one-cycle
LR over ``FE so far / budget`` and stop when it is spent; pruning arms run the baseline's epochs of that budget and
anneal over epochs. Seconds are this thread's CPU time, evaluation excluded."""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import torch

from ._sb import auto_decisions, has_auto
from .cost import priced, upfront_fe
from .lm import ByteLM, validation_loss
from .lm_arms import LMArm, SequenceBatches, sequence_losses
from .timing import cpu_clock
from .train import fit, one_cycle, train_step

WEIGHT_DECAY = 0.01
IRREDUCIBLE = {"width": 64, "layers": 1, "heads": 2}  # the small model that estimates irreducible losses
IRREDUCIBLE_RECIPE = {"batch": 16, "lr": 4e-3, "epochs": 1}


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.95))


def train_irreducible(holdout: torch.Tensor, sequences: int, seed: int) -> tuple[ByteLM, float, float]:
    """Train the irreducible-loss model on ``sequences`` hold-out chunks; returns (model, FE, CPU seconds).

    Uses its own RNG stream (``fork_rng``), so the live model's initialisation is the same as in every other arm.
    """
    started = cpu_clock()
    with torch.random.fork_rng():
        torch.manual_seed(20_000 + seed)
        model = ByteLM(**IRREDUCIBLE)
        data = holdout[torch.randperm(len(holdout))[:sequences]]
        batches = SequenceBatches(data, IRREDUCIBLE_RECIPE["batch"], seed)
        optimizer = make_optimizer(model, IRREDUCIBLE_RECIPE["lr"])
        fit(model, optimizer, batches, IRREDUCIBLE_RECIPE["epochs"], IRREDUCIBLE_RECIPE["lr"], losses=sequence_losses)
    model.eval()
    fe = upfront_fe(relative_cost(model), IRREDUCIBLE_RECIPE["epochs"], len(data))
    return model, fe, cpu_clock() - started


def relative_cost(model: ByteLM) -> float:
    """A model's forward FLOPs per token relative to the benchmark's ``ByteLM()``."""
    return model.flops_per_token() / ByteLM().flops_per_token()


def train_run(
    chunks: torch.Tensor,
    noisy: torch.Tensor,
    validation: torch.Tensor,
    arm: LMArm,
    *,
    recipe: dict[str, Any],
    budget_fe: float,
    epochs: float,
    seed: int,
    budget_seconds: float | None = None,
    holdout: torch.Tensor | None = None,
    irreducible_sequences: int = 0,
    evals: int = 4,
) -> dict[str, Any]:
    """Train ``arm`` on ``chunks`` to ``budget_fe`` (or ``epochs`` for pruning arms); return its JSON record.

    Args:
        chunks: the regime's pool (N, T) uint8; batches' ``ids`` index it.
        noisy: (N,) bool, the noise-like flag of each chunk.
        validation: held-out chunks (by file) for the validation loss.
        arm: the configuration.
        recipe: ``{"batch", "lr"}``, the tuned baseline's unless the arm sets its own.
        budget_fe: forward-equivalents to spend (FE-metered arms).
        epochs: the baseline's epochs at this budget (pruning arms run this many, rounded up).
        seed: initialisation and data-order seed, shared by every arm.
        budget_seconds: with a number, train for that many CPU seconds instead (the LR annealed over seconds):
            how the baseline's grid is tuned, at equal seconds.
        holdout, irreducible_sequences: the irreducible model's data (``reducible`` arms).
        evals: validation points after the start, evenly spaced in progress.
    """
    batch, lr = arm.batch or recipe["batch"], arm.lr or recipe["lr"]
    irreducible, upfront_fe, upfront_seconds, extra = None, 0.0, 0.0, 0.0
    if arm.policy == "reducible":
        irreducible, upfront_fe, upfront_seconds = train_irreducible(holdout, irreducible_sequences, seed)
        extra = relative_cost(irreducible)
    torch.manual_seed(seed)
    model = ByteLM()
    optimizer = make_optimizer(model, lr)
    run_epochs = max(1, math.ceil(epochs - 1e-9))
    loader, source, observer = arm.build(
        model, chunks, batch=batch, seed=seed, epochs=run_epochs, irreducible=irreducible
    )
    engine = getattr(loader, "engine", None)
    weights = getattr(observer, "weights", None)
    trained = noisy_trained = steps = 0
    seconds = upfront_seconds

    def fe() -> float:
        scored = 0 if engine is None else engine.counts["samples_scored"]  # every step: the free read
        return priced(scored * (1 + extra), trained, upfront=upfront_fe)

    started = cpu_clock()

    def progress() -> float:
        if budget_seconds is not None:
            return (seconds + cpu_clock() - started - upfront_seconds) / budget_seconds
        return source.progress / run_epochs if arm.metered_by_epochs else (fe() - upfront_fe) / budget_fe

    curve = [_point(model, validation, 0.0, fe(), seconds, 0, 0)]
    next_eval, done = 1, False
    for epoch in itertools.count():
        if arm.metered_by_epochs and budget_seconds is None and epoch >= run_epochs:
            break
        loader.set_epoch(epoch)  # SBLoader passes it on to its source
        started = cpu_clock()
        for data in loader:
            for group in optimizer.param_groups:
                group["lr"] = one_cycle(min(1.0, progress()), lr)
            observe = None if observer is None else observer.observe
            train_step(model, optimizer, data, losses=sequence_losses, observe=observe, weights=weights)
            trained += len(data["input_ids"])
            noisy_trained += int(noisy[data["ids"]].sum())
            steps += 1
            now = progress()
            done = (budget_seconds is not None or not arm.metered_by_epochs) and now >= 1.0
            if done or (now >= next_eval / evals and next_eval < evals):
                seconds += cpu_clock() - started
                curve.append(_point(model, validation, min(now, 1.0), fe(), seconds, trained, steps))
                next_eval = min(evals, math.floor(now * evals) + 1)
                started = cpu_clock()
            if done:
                break
        if done:
            break
        seconds += cpu_clock() - started
    if curve[-1]["steps"] != steps:
        curve.append(_point(model, validation, 1.0, fe(), seconds, trained, steps))
    final = curve[-1]
    scored = 0 if engine is None else engine.stats.samples_scored
    auto = None
    if engine is not None and has_auto(engine):  # keep="auto": what the controller decided, for the report
        auto = auto_decisions(engine.stats)
    tokens = trained * chunks.shape[1]
    return {
        "arm": arm.name,
        "seed": seed,
        "config": {**arm.describe(), "batch": batch, "lr": lr},
        "val_loss": final["val_loss"],
        "perplexity": math.exp(final["val_loss"]),
        "fe": final["fe"],
        "seconds": final["seconds"],
        "budget_fe": budget_fe,
        "budget_seconds": budget_seconds,
        "steps": steps,
        "sequences_trained": trained,
        "sequences_scored": scored,
        "sequences_reused": 0 if engine is None else engine.stats.samples_reused,
        "epochs_read": round(source.progress, 4),
        "noisy_share": noisy_trained / max(1, trained),
        "data_noisy_share": float(noisy.float().mean()),
        "trained_tokens_per_second": tokens / max(1e-9, final["seconds"] - upfront_seconds),
        "upfront_fe": upfront_fe,
        "upfront_seconds": upfront_seconds,
        "curve": curve,
        **({} if auto is None else {"auto": auto}),
        "time": time.time(),
    }


def _point(model, validation, progress: float, fe: float, seconds: float, trained: int, steps: int) -> dict:
    return {
        "progress": round(progress, 4),
        "fe": fe,
        "seconds": round(seconds, 3),
        "val_loss": validation_loss(model, validation),
        "trained": trained,
        "steps": steps,
    }
