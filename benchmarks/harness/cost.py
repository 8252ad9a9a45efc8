"""The one cost model of the benchmarks, each price one function here: sbdata's ``CostTable`` (forward-equivalents,
:func:`priced`); an arm's expected cost (:func:`cost_per_epoch`) and its seconds priced from interleaved step timings
(:func:`step_kind`, :func:`suite_arm_seconds`, :func:`pruning_run_seconds`, :func:`frontier_run_seconds`, and
:func:`frontier_limits`, what an epoch can cost at best); and the calibrated model, sbdata's (``Costs``,
``costs_from``, ``sb_step_seconds``; described in ``sbdata/auto/_calibrated.py``), timed here by :func:`calibrate` in
the one timing loop.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from ._sb import CostTable, calibration_calls, costs_from
from .timing import cpu_clock, interleaved


class PricedArm(Protocol):
    """What the arm pricing reads of an arm (``arms.Arm``)."""

    policy: str | None
    keep: float
    pooled: bool
    start: float | None
    end: float
    interrupt: int
    score_mode: str
    small_batch: bool
    base: str
    holdout: float
    il_epochs: int
    staleness: int | None
    observe: bool


FE = CostTable.forward_equivalents()  # sbdata's machine-free cost model: a scored sample costs 1, a trained one 3


def priced(scored: float, trained: float, *, upfront: float = 0.0, costs: CostTable = FE) -> float:
    """The cost of scoring ``scored`` samples and training ``trained`` (sums over many calls), plus ``upfront``, priced
    by sbdata's :class:`CostTable` (forward-equivalents by default; per-call fixed costs do not apply to such sums).

    The one per-sample pricing of the benchmarks: a run's FE (``train.train_run``, ``lm_train.train_run``) and an
    arm's expected FE per epoch (:func:`cost_per_epoch`)."""
    return upfront + costs.score(scored) + costs.train(trained)


def selecting(arm: PricedArm) -> float:
    """Share of an arm's loader batches that are selection steps (its schedule's window and interrupts)."""
    if arm.policy is None:
        return 0.0
    return 1.0 if arm.start is None else (arm.end - arm.start) * (1 - 1 / arm.interrupt if arm.interrupt else 1)


def scored_share(arm: PricedArm) -> float:
    """Expected share of an SB step's samples that go through the scoring forward: 1 without a cache; with one,
    about one epoch in ``staleness + 1``, less what ``observe`` refreshes (roughly the kept share)."""
    if arm.staleness is None:
        return 1.0
    return (1 - arm.keep if arm.observe else 1.0) / (arm.staleness + 1)


def cost_per_epoch(arm: PricedArm) -> float:
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


def loader_batch_fe(arm: PricedArm, batch: int, loader_batch: int, kept: int) -> float:
    """Forward-equivalents of one loader batch of an arm's selection step (or plain step at ``loader_batch``): 3 per
    trained sample, 1 per scored one, plus the irreducible model's forward (``ReducibleSelect``)."""
    return (
        3 * loader_batch if arm.policy is None else batch * (1 + (1.0 if arm.policy == "reducible" else 0.0)) + 3 * kept
    )


def upfront_fe(relative: float, epochs: float, samples: int) -> float:
    """Forward-equivalents of training a model ``relative`` times the live one's forward cost for ``epochs`` over
    ``samples`` up front (an irreducible model): 3 per trained sample."""
    return 3.0 * relative * epochs * samples


def step_kind(arm: PricedArm) -> str:
    """What one loader batch of an arm costs, whatever its schedule: the key of the timing table."""
    if arm.policy is None:
        return f"plain batch {'keep*B ' + str(arm.keep) if arm.small_batch else 'B'}"
    layout = "fixed" if arm.pooled else "shrink"
    policy = f"reducible/{arm.base}" if arm.policy == "reducible" else arm.policy
    cache = "" if arm.staleness is None else f" cache s={arm.staleness}{' observe' if arm.observe else ''}"
    return f"{policy} keep={arm.keep} {layout} {arm.score_mode}{cache}"


def suite_arm_seconds(arm: PricedArm, timing: dict[str, dict], train_samples: int, batch: int) -> tuple[float, float]:
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


def frontier_run_seconds(record: dict[str, Any], kinds: dict[str, dict[str, float]], samples: int) -> float:
    """A frontier run's priced seconds: its loader batches at the seconds per batch of its step kind (``kinds``: the
    suite's interleaved step timing); the reducible arm's up-front training steps at plain steps' and its scoring pass
    at the ``score`` kind's; a warm-cache step between the all-reused and the all-scored warm step by the run's share of
    scored samples; ``keep="auto"`` as the plain run of its batch, LR and epochs times the ratio of their CPU seconds.
    ``samples``: the mix's size."""
    cfg = record["config"]
    t = {name: kind["seconds_per_batch"] for name, kind in kinds.items()}
    batch, steps = cfg["batch"], record["steps"]
    if cfg["keep"] == "auto":
        plain_batches = record["epochs"] * math.ceil(samples / batch)
        return plain_batches * t[f"plain b={batch}"] * record["cpu_seconds"] / record["paired_plain_cpu_seconds"]
    if cfg["policy"] is None:
        if cfg["prune"] is None:
            return steps * t[f"plain b={batch}"]
        rule = cfg.get("rule", "infobatch")  # records before the rule= field are InfoBatch's
        return steps * t[f"prune b={batch}" if rule == "infobatch" else f"{rule} b={batch}"]
    if not cfg["warm"]:  # plus any up-front work (the reducible arm's irreducible model), priced as plain steps
        upfront = 0.0  # and scoring batches; a timing without those kinds raises rather than pricing them at 0
        if record.get("upfront_steps"):
            upfront += record["upfront_steps"] * t[f"plain b={batch}"]
        if record.get("upfront_scored"):
            upfront += math.ceil(record["upfront_scored"] / batch) * t[f"score b={batch}"]
        policy = cfg["policy"] + ("-bf16" if cfg.get("autocast") else "")
        return steps * t[f"{policy} keep={cfg['keep']} b={batch}"] + upfront
    sb = record["sb"]
    share = sb["samples_scored"] / max(1, sb["samples_seen"])
    reused, scored = t[f"warm-reused keep={cfg['keep']} b={batch}"], t[f"warm-scored keep={cfg['keep']} b={batch}"]
    return steps * (reused + share * (scored - reused))


CHECK_EVERY = 100  # sbdata's default autocast_check_every: one batch in 100 also scored at full precision


def back_to_back_name(score: str, batch: int, kept: int) -> str:
    """The timing kind of a scoring pass (``score`` or ``score-bf16``) at ``batch`` followed by a plain training step
    at ``kept``, run back to back without sbdata (what running the two parts one after the other costs)."""
    return f"back to back: {score} b={batch}, train b={kept}"


_SELECTION_KIND = re.compile(r"(?P<kind>\S+) keep=(?P<keep>[\d.]+) b=(?P<batch>\d+)$")


def price_table(kinds: dict[str, dict[str, float]], batch: int) -> list[dict[str, Any]]:
    """Every selection and sampler step kind's measured seconds per loader batch beside its **limit**: the sum of
    its separately timed parts, never the measured step itself (issue 42). The parts: the scoring pass at the loader
    batch (``score b=B``; bfloat16's ``score-bf16 b=B`` plus one full-precision pass in :data:`CHECK_EVERY`, the live
    check's), the training step at the kept batch (the plain kind ``plain b=ceil(keep * B)``; a sampler's at its
    loader batch, nothing scored; the warm cache's reused step scores nothing) and sbdata's own work in that step
    (``own: KIND``). A kind whose parts were not timed is left out. ``batch``: the user's loader batch, whose plain
    step makes the plain-epoch columns.

    Returns:
        Rows ``{"path", "measured", "limit", "parts", "over", "measured_epochs", "limit_epochs", "back_to_back",
        "over_back_to_back"}``: seconds per loader batch, ``over`` = measured / limit - 1, and both in plain epochs
        (over the plain step at ``batch``); ``back_to_back``: the scoring pass and the kept batch's training step
        timed one after the other without sbdata (:func:`back_to_back_name`) plus the other parts, where timed
        (else None; not a limit: what running two parts in a row costs beyond the two apart), and measured over it.
    """
    t = {name: kind["seconds_per_batch"] for name, kind in kinds.items()}
    plain = t.get(f"plain b={batch}")
    rows: list[dict[str, Any]] = []
    if plain is None:
        return rows
    for name, measured in t.items():
        own = t.get(f"own: {name}")
        if own is None:
            continue
        parts: dict[str, float | None] = {}
        scored: tuple[str, str, str] | None = None  # (scoring part, training part, their back-to-back kind)
        match = _SELECTION_KIND.match(name)
        if match is None:  # a sampler's step: plain training on what it loads, nothing scored
            b = int(name.rsplit("b=", 1)[1])
            parts[f"train b={b}"] = t.get(f"plain b={b}")
        else:
            kind, keep, b = match["kind"], float(match["keep"]), int(match["batch"])
            kept = math.ceil(keep * b)
            if kind != "warm-reused":  # the warm cache's reused step scores nothing
                score = "score-bf16" if kind == "topk-bf16" else "score"
                parts[f"{score} b={b}"] = t.get(f"{score} b={b}")
                if kind == "topk-bf16":
                    full = t.get(f"score b={b}")
                    parts["full-precision check"] = None if full is None else full / CHECK_EVERY
                scored = (f"{score} b={b}", f"train b={kept}", back_to_back_name(score, b, kept))
            parts[f"train b={kept}"] = t.get(f"plain b={kept}")
        parts["sbdata"] = own
        if any(v is None for v in parts.values()):
            continue
        limit = sum(v for v in parts.values() if v is not None)
        paired = None  # the scoring pass and the training step run back to back (no sbdata), plus the other parts
        if scored is not None and scored[2] in t:
            score_part, train_part, pair = scored
            paired = t[pair] + limit - (parts[score_part] or 0.0) - (parts[train_part] or 0.0)
        rows.append({
            "path": name, "measured": measured, "limit": limit, "parts": parts, "over": measured / limit - 1.0,
            "measured_epochs": measured / plain, "limit_epochs": limit / plain, "back_to_back": paired,
            "over_back_to_back": None if paired is None else measured / paired - 1.0,
        })  # fmt: skip
    return rows


def frontier_limits(kinds: dict[str, dict[str, float]], sizes: Any, staleness: int, batch: int = 256) -> dict[str, Any]:
    """What an epoch can cost at best, in plain epochs at the user's ``batch``, from the price table's limits (the sums
    of separately timed parts, :func:`price_table`): in a continued suite, training only the new samples and scoring
    nothing (``ideal``); each selection kind at the user's batch; the warm cache at each keep (known samples rescored
    once every ``staleness + 1`` epochs; ``sizes``: a continued suite's, with ``new``, ``mix`` and ``known``, or
    None)."""
    out: dict[str, Any] = {}
    if sizes is not None:
        out.update(new_share=sizes.new / sizes.mix, known_share=sizes.known)
        out["ideal"] = sizes.new / sizes.mix  # train the new samples once an epoch, score nothing
    limits = {row["path"]: row["limit_epochs"] for row in price_table(kinds, batch)}
    for path, value in limits.items():
        if path.endswith(f"b={batch}") and not path.startswith("warm-"):
            out[path] = value
    for keep in (0.25, 0.5):
        reused = limits.get(f"warm-reused keep={keep} b={batch}")
        scored = limits.get(f"warm-scored keep={keep} b={batch}")
        if reused is not None and scored is not None:
            out[f"warm keep={keep}"] = reused + (scored - reused) / (staleness + 1)
            out[f"warm keep={keep}, nothing scored"] = reused
    return out


def calibrate(
    make_model: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    train_sizes: list[int],
    score_sizes: list[int],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    engine_steps: dict[str, Callable[[], None]] | None = None,
    engine_batch: int | None = None,
    block: int = 8,
    rounds: int = 5,
    clock: Callable[[], float] = cpu_clock,
    measure: bool = True,
) -> Any:
    """Measure :class:`Costs` for a model on samples of ``x``/``y``: every call timed one by one in the one timing loop
    (:func:`~.timing.interleaved`, ``rounds * block`` rounds after one warm-up), medians kept.

    Args:
        make_model: a fresh model.
        x, y: inputs and targets to slice batches from (at least the largest size).
        train_sizes, score_sizes: the batch sizes to measure.
        make_optimizer: the recipe's optimizer; default AdamW(lr=1e-3).
        engine_steps: by configuration name, one SB step of that configuration's engine on a ready batch of
            ``engine_batch`` samples; its time minus ``score[engine_batch]`` is that configuration's ``overhead``.
        block, rounds: each function is called ``rounds * block`` times, interleaved one by one.
        clock: the timer; this thread's CPU time by default.
        measure: False returns the calls by name instead, for :func:`costs_from` after timing them elsewhere.
    """
    calls = calibration_calls(make_model, x, y, train_sizes=train_sizes, score_sizes=score_sizes,
                              make_optimizer=make_optimizer, engine_steps=engine_steps,
                              engine_batch=engine_batch)  # fmt: skip
    if not measure:
        return calls

    def timed(call: Callable[[], Any]) -> Callable[[int], float]:
        def run(_: int) -> float:
            started = clock()
            call()
            return clock() - started

        return run

    times = interleaved({name: timed(call) for name, call in calls.items()}, rounds * block, warmup=1)
    return costs_from({name: statistics.median(values) for name, values in times.items()}, engine_batch)
