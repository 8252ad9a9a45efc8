"""The one cost model of the benchmarks, each price one function here: sbdata's ``CostTable`` (forward-equivalents,
:func:`priced`); an arm's expected cost (:func:`cost_per_epoch`) and its seconds priced from interleaved step timings
(:func:`step_kind`, :func:`suite_arm_seconds`, :func:`pruning_run_seconds`, :func:`frontier_run_seconds`, and
:func:`frontier_limits`, what an epoch can cost at best); and the calibrated model (:class:`Costs`,
:func:`calibrate`, :func:`costs_from`, :func:`sb_step_seconds`), which predicts an SB step's seconds from a few
measured calls of this machine: a batch gathered (``data[b]``), a training step (``train[b]``), a scoring forward
(``score[b]``) and sbdata's own work per SB step beyond the scoring forward (``overhead``). A plain loader batch of B
costs ``data[B] + train[B]``; an SB step keeping ``k``: ``data[B] + score[B] + overhead + train[k]`` (shrunk) or
``... + (k / B) * train[B]`` (fixed batches of B); with a loss cache, ``score`` averaged over the sizes scored.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ._sb import CostTable
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
        return steps * t[f"prune b={batch}" if cfg["prune"] is not None else f"plain b={batch}"]
    if not cfg["warm"]:  # plus any up-front work (the reducible arm's irreducible model), priced as plain steps
        upfront = 0.0  # and scoring batches; a timing without those kinds raises rather than pricing them at 0
        if record.get("upfront_steps"):
            upfront += record["upfront_steps"] * t[f"plain b={batch}"]
        if record.get("upfront_scored"):
            upfront += math.ceil(record["upfront_scored"] / batch) * t[f"score b={batch}"]
        return steps * t[f"{cfg['policy']} keep={cfg['keep']} b={batch}"] + upfront
    sb = record["sb"]
    share = sb["samples_scored"] / max(1, sb["samples_seen"])
    reused, scored = t[f"warm-reused keep={cfg['keep']} b={batch}"], t[f"warm-scored keep={cfg['keep']} b={batch}"]
    return steps * (reused + share * (scored - reused))


def frontier_limits(kinds: dict[str, dict[str, float]], sizes: Any, staleness: int, batch: int = 256) -> dict[str, Any]:
    """What an epoch can cost at best, in plain epochs at the user's ``batch`` (from the step timing): in a continued
    suite, training only the new samples and scoring nothing (``ideal``); fresh scoring at each keep; the warm cache at
    each keep (known samples rescored once every ``staleness + 1`` epochs; ``sizes``: a continued suite's, with ``new``,
    ``mix`` and ``known``, or None); and the per-sample seconds they come
    from."""
    t = {name: kind["seconds_per_batch"] for name, kind in kinds.items()}
    b = batch
    plain = t[f"plain b={b}"]
    out: dict[str, Any] = {}
    if sizes is not None:
        out.update(new_share=sizes.new / sizes.mix, known_share=sizes.known)
        out["ideal"] = sizes.new / sizes.mix  # train the new samples once an epoch, score nothing
    for keep in (0.25, 0.5):
        fresh, reused, scored = (t.get(f"topk keep={keep} b={b}"), t.get(f"warm-reused keep={keep} b={b}"),
                                 t.get(f"warm-scored keep={keep} b={b}"))  # fmt: skip
        if fresh is not None:
            out[f"fresh keep={keep}"] = fresh / plain
        if reused is not None and scored is not None:
            out[f"warm keep={keep}"] = (reused + (scored - reused) / (staleness + 1)) / plain
            out[f"warm keep={keep}, nothing scored"] = reused / plain
    low, high = f"topk keep=0.25 b={b}", f"topk keep=0.5 b={b}"
    if low in t and high in t:
        per_trained = (t[high] - t[low]) / (0.25 * b)
        out["train_seconds_per_sample"] = per_trained
        out["score_seconds_per_sample"] = (t[low] - math.ceil(0.25 * b) * per_trained) / b
        out["plain_seconds_per_sample"] = plain / b
    return out


@dataclass
class Costs:
    """Measured seconds per call: a batch gathered, a training step (interleaved; ``plain``: back to back, as a plain
    loop runs them) and a scoring forward, by batch size; sbdata's work per SB step, by configuration name."""

    data: dict[int, float] = field(default_factory=dict)
    train: dict[int, float] = field(default_factory=dict)
    plain: dict[int, float] = field(default_factory=dict)
    score: dict[int, float] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in ("data", "train", "plain", "score", "overhead")}

    def plain_step(self, batch: int) -> float:
        """Seconds of one plain training step at ``batch``, data included (back to back where measured)."""
        return self.data.get(batch, 0.0) + self.plain.get(batch, self.train[batch])


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
    model = make_model()
    optimizer = (make_optimizer or (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)))(model)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    engine_steps = engine_steps or {}

    def gather(b: int) -> Callable[[], None]:
        return lambda: (x[order[:b]], y[order[:b]])

    def train(b: int) -> Callable[[], None]:
        def step() -> None:
            model.train()
            loss = F.cross_entropy(model(x[:b]), y[:b])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    def score(b: int) -> Callable[[], None]:
        def forward() -> None:
            model.eval()
            with torch.no_grad():
                F.cross_entropy(model(x[:b]), y[:b], reduction="none")
            model.train()

        return forward

    trains = sorted(set(train_sizes))
    scores = sorted(set(score_sizes) | ({engine_batch} if engine_steps else set()))
    calls: dict[str, Callable[[], Any]] = {f"data {b}": gather(b) for b in trains}
    calls.update({f"train {b}": train(b) for b in trains})
    calls.update({f"score {b}": score(b) for b in scores})
    calls.update({f"engine {name}": step for name, step in engine_steps.items()})
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


def costs_from(seconds: dict[str, float], engine_batch: int | None = None) -> Costs:
    """:class:`Costs` from the median seconds of :func:`calibrate`'s calls, by name (``"train 256"``, ...)."""
    costs = Costs()
    for name, value in seconds.items():
        kind, _, key = name.partition(" ")
        if kind == "engine":
            costs.overhead[key] = max(0.0, value - seconds[f"score {engine_batch}"])
        elif kind in ("data", "train", "plain", "score"):
            getattr(costs, kind)[int(key)] = value
    return costs


def _at(table: dict[int, float], size: int) -> float:
    """``table[size]``, or a linear interpolation between the measured sizes around it (extrapolated at the ends)."""
    if size in table:
        return table[size]
    sizes = sorted(table)
    if len(sizes) == 1:
        return table[sizes[0]] * size / sizes[0]
    low = max([s for s in sizes if s < size] or sizes[:1])
    high = min([s for s in sizes if s > size and s != low] or sizes[-1:])
    if high == low:
        low = sizes[-2]
    return table[low] + (table[high] - table[low]) * (size - low) / (high - low)


def sb_step_seconds(
    costs: Costs, batch: int, kept: int, *, overhead: str, fixed: bool = False, scored: dict[int, float] | None = None
) -> float:
    """The calibrated model's seconds of one SB loader batch of ``batch`` samples keeping ``kept`` (module docstring).

    Args:
        overhead: the configuration whose measured ``overhead`` applies.
        fixed: output batches of ``batch`` (pooled) rather than shrunk batches of ``kept``.
        scored: for a cached run, the share of SB steps that scored at each size (0: nothing scored); default
            every step scores the whole batch.
    """
    mix = scored if scored is not None else {batch: 1.0}
    scoring = sum(share * _at(costs.score, size) for size, share in mix.items() if size)
    training = kept / batch * costs.train[batch] if fixed else costs.train[kept]
    return costs.data.get(batch, 0.0) + scoring + costs.overhead[overhead] + training
