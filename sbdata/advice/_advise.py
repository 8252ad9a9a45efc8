"""Before training: what selection and a smaller batch can do on *this* run. ``advise`` measures a few dozen steps of
the user's own model.

Its steps, each a function of its own module:

1. **Time** (``_timing.time_steps``): on the user's device and a copy of the user's model (with a copy of the user's
   optimizer, state included, when given), the scoring pass and a training step at the loader's batch size and at a
   quarter of it (interleaved, after a warm-up); and how unequal the scores are (``tau``,
   :func:`~sbdata.auto.tau_from_sums`) on those batches.
2. **Trial** (``_trial.run_trial``), with an optimizer: every option trained side by side on its own copy, from the
   model as it is, and measured on held-out batches.
3. **Price** (``_pricing.price``): a :class:`~sbdata.CostTable` fitted to the times prices every keep, with and
   without a ``LossCache``, and the small-batch control, each as a *range*: from the noise-dominated bound (progress
   proportional to the batch: the lowest) to far above the critical batch (progress independent of the batch: only
   the seconds count). Where a training run sits in that range, and what a biased policy such as top-k gains or
   loses, no estimate made before training can know (``benchmarks/calibration`` measured top-k above the whole
   range, while random, priced the same, never reached the user's accuracy): a range that straddles 1 means
   "measure it", which the trial, or ``keep="auto"`` on the run, does.
4. **Decide**: from the trial's measurements where it ran (``_trial.measured_recommendation``), else from the
   price list.

The model, its optimizer and the global RNGs are left as they were.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata._util import epoch_length, model_device
from sbdata.advice._pricing import price, times
from sbdata.advice._settings import Candidates, Measurement, Training
from sbdata.advice._timing import default_clock, time_steps
from sbdata.advice._trial import (
    caution,
    measured_recommendation,
    probe_batches,
    run_trial,
    trial_batches,
    trial_name,
    trial_size,
)
from sbdata.auto import CostTable
from sbdata.distributed import scoring_module
from sbdata.scoring import Scorer

__all__ = ["Advice", "advise"]

DEFAULT_STEPS = 32  # loader batches timed when Measurement(steps=) is not given


@dataclass
class Advice:
    """What :func:`advise` measured and predicts. ``str(advice)`` prints it as a table with the recommendation.

    Attributes:
        batch: the loader's batch size B.
        batches_per_epoch: loader batches per epoch (``len(loader)``), or None if the loader has no length.
        steps: the loader batches timed.
        costs: the fitted seconds of a scoring pass and of a training step (plus sbdata's overhead).
        tau: how unequal the scores of the timed batches are: ``sqrt(mean(s^2)) / mean(s)``, 1 when all are alike,
            higher when a few samples carry much of the loss (the variance-reduction factor of importance sampling).
        score_share: the scoring pass's seconds as a share of a plain training step's at B.
        rows: per option, ``{"option", "keep", "cache", "low", "high", "seconds_per_epoch"}``: ``low`` and ``high``
            the predicted speed-up (progress per second against training on whole batches, > 1 pays) at the two
            ends of the range (noise-dominated; far above the critical batch), ``seconds_per_epoch`` the predicted
            seconds of one epoch (None without ``batches_per_epoch``). The option "smaller batch b" is the recipe
            at batch ``b = ceil(keep * B)`` on every sample (its learning rate retuned).
            With a branch trial, ``"measured"``: the option's measured speed-up (None where the trial has no such
            option: the ``LossCache`` rows, whose reuse needs several epochs).
        recommendation: what to do, in words: what was compared, what was decided and why; from the branch trial
            where one ran (the best measured option, and what the controls say about why), else from the
            predicted range. It starts with ``"select: "``, ``"measure it: "``, ``"measured: "`` or
            ``"train on whole batches"``.
        choice: the option the recommendation names, as in ``rows``/``trial`` (``"no selection"``: whole batches).
        trial_steps: loader batches each option of the branch trial trained (0: no trial).
        trial: per option of the branch trial, ``{"option", "arm", "keep", "seconds", "start", "end",
            "difference", "se", "speedup", "curve"}``: ``arm`` one of ``"plain"``, ``"topk"``, ``"random"``,
            ``"small"``; ``seconds`` its training seconds over the trial (measured, or priced by
            ``Measurement(costs=)``); ``start`` and ``end`` the probe's mean quality (accuracy for class logits,
            else minus the per-sample loss) before and after; ``difference`` its ``end`` minus plain's at equal
            loader batches, ``se`` the paired standard error of that difference; ``speedup`` plain's seconds to the
            lower of the two final qualities over the option's (> 1: faster; 0.0: it ended no higher than it
            started); ``curve`` the :class:`~sbdata.advice.Curve` of checkpoints.
        trial_note: why there was no trial, or why it was shorter than asked ("" otherwise).
    """

    batch: int
    batches_per_epoch: int | None
    steps: int
    costs: CostTable
    tau: float
    score_share: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    recommendation: str = ""
    choice: str = ""
    trial_steps: int = 0
    trial: list[dict[str, Any]] = field(default_factory=list)
    trial_note: str = ""

    def __str__(self) -> str:
        alike = "1 = all alike" if self.tau < 1.2 else "1 = all alike; higher: a few samples carry much of the loss"
        lines = [
            f"timed {self.steps} batches of {self.batch} on a copy of your model: scoring a batch costs "
            f"{self.score_share:.0%} of training on it; how unequal the losses are: tau {self.tau:.2f} ({alike})",
            "predicted speed against training on whole batches (above 1: faster): 'worst' if smaller steps learn "
            "proportionally less, 'best' if only the seconds count; s/epoch: predicted seconds per epoch",
            f"{'option':<36}{'worst':>7}{'best':>7}{'s/epoch':>10}",
        ]
        if self.trial:
            lines[-1] += f"{'measured':>10}"
        for row in self.rows:
            seconds = "" if row["seconds_per_epoch"] is None else f"{row['seconds_per_epoch']:.2f}"
            line = f"{row['option']:<36}{row['low']:>6.2f}x{row['high']:>6.2f}x{seconds:>10}"
            if self.trial:
                line += f"{times(row.get('measured')):>10}"
            lines.append(line)
        if self.trial:
            lines += [
                f"trial: each option trained {self.trial_steps} loader batches on its own copy of your model and "
                "optimizer, from the model as it is; quality: the held-out batches' accuracy (class logits) or minus "
                "their loss; vs whole: its final quality minus whole batches' (+- standard error); measured: whole "
                "batches' seconds to the quality both reached over the option's (above 1: faster)",
                f"{'option':<36}{'seconds':>9}{'start':>9}{'end':>9}{'vs whole':>18}{'measured':>10}",
            ]
            for row in self.trial:
                versus = "" if row["arm"] == "plain" else f"{row['difference']:+.4f} +- {row['se']:.4f}"
                lines.append(f"{row['option']:<36}{row['seconds']:>9.3f}{row['start']:>9.4f}{row['end']:>9.4f}"
                             f"{versus:>18}{times(row['speedup']):>10}")  # fmt: skip
        if self.trial and self.trial_note:
            lines.append(self.trial_note)
        return "\n".join([*lines, self.recommendation])


def advise(
    loader: Iterable[Any],
    model: nn.Module,
    loss_fn: Any,
    *,
    training: Training | None = None,
    candidates: Candidates | None = None,
    measurement: Measurement | None = None,
    split: Callable[[Any], tuple[Any, Any]] | None = None,
    forward: Callable[[nn.Module, Any], Any] | None = None,
    reduce: Callable[[torch.Tensor, Any], torch.Tensor] | None = None,
    device: torch.device | str | None = None,
) -> Advice:
    """Time a few loader batches of the user's model, trial the options with the user's optimizer, and say what
    selection and a smaller batch can do.

    Args:
        loader: the training loader (any iterable of batches); batches are read from a new iterator.
        model: the user's model as it is (at the start, or mid-training); it is copied for the training steps, and
            scored in place without side effects.
        loss_fn: the per-sample loss (as for :class:`~sbdata.SBLoader`).
        training: how the copies train: :class:`~sbdata.advice.Training` (the user's ``optimizer``, copied with its
            state, or ``make_optimizer``; the user's ``train_step``). Default None: ``Training()``, SGD at learning
            rate 0 for the timed steps and no trial.
        candidates: which options to price and trial: :class:`~sbdata.advice.Candidates` (``keeps``,
            ``staleness``, ``score``). Default None: ``Candidates()``.
        measurement: how to measure: :class:`~sbdata.advice.Measurement` (``steps``, ``trial_steps``, ``probe``,
            ``costs``, ``clock``). Default None: ``Measurement()``.
        split: ``split(batch) -> (inputs, targets)``; default as :class:`~sbdata.SBLoader`'s.
        forward: ``forward(model, inputs) -> outputs``, as :class:`~sbdata.SBLoader`'s (e.g. ``m(x).logits``);
            default ``model(inputs)``. Used by the scores, the default training step and the probe's quality.
        reduce: ``reduce(losses, targets) -> (B,)`` for per-token losses, as :class:`~sbdata.SBLoader`'s; default
            the mean over the non-batch dimensions. ``**sbdata.tasks.causal_lm()`` passes ``split``, ``forward``,
            ``loss_fn`` and ``reduce`` together: the probe's quality is then minus nats per token.
        device: where to run; default the model's.

    Raises:
        ValueError: for a loader of fewer than 4 batches (with the default ``steps``), a loader that ends before
            ``steps`` batches, a trial without an optimizer, a trial that does not fit in one epoch without
            ``probe``, a ``probe`` without batches, or an FSDP-sharded model.
    """
    training = training if training is not None else Training()
    candidates = candidates if candidates is not None else Candidates()
    measurement = measurement if measurement is not None else Measurement()
    steps = _steps(loader, measurement)
    _check_model_and_trial(model, training, measurement)
    model = scoring_module(model)  # a DDP model: its module (the same parameters), trialled in this process alone
    place = torch.device(device) if device is not None else model_device(model)
    scorer = Scorer(loss_fn, forward=forward, reduce=reduce, score=candidates.score)
    split_fn = split if split is not None else _batch.default_split

    def prepare(batch: Any) -> tuple[Any, Any]:
        return split_fn(_batch.to_device(batch, place))

    timer = measurement.clock if measurement.clock is not None else default_clock(place)
    make_optimizer = training.factory(model)
    length = epoch_length(loader)
    with torch.random.fork_rng(devices=[place] if place.type == "cuda" else []):
        batches = iter(loader)
        # 1. time the scoring pass and the training step, and measure how unequal the scores are
        timed = time_steps(batches, steps, model, make_optimizer, scorer=scorer, prepare=prepare, device=place,
                           timer=timer, train_step=training.train_step)  # fmt: skip
        # 2. train every option side by side on copies (with an optimizer)
        trial, note = trial_size(measurement.trial_steps, training.has_optimizer, measurement.probe is not None,
                                 length, steps)  # fmt: skip
        trials: list[dict[str, Any]] = []
        if trial:
            held_out = probe_batches(measurement.probe, batches, prepare)
            chosen = trial_batches(loader, batches, trial, measurement.probe is not None)
            trials = run_trial(
                model, make_optimizer, chosen, trial, held_out, candidates.keeps, train_step=training.train_step,
                prepare=prepare, scorer=scorer, device=place, timer=timer, costs=measurement.costs,
                batch=timed.batch,
            )  # fmt: skip
    # 3. price every option
    costs = measurement.costs if measurement.costs is not None else timed.cost_table()
    rows, recommendation, choice = price(timed.batch, length, costs, timed.tau, candidates)
    tau = timed.tau if math.isfinite(timed.tau) else 1.0
    share = costs.score(timed.batch) / costs.train(timed.batch)
    advice = Advice(timed.batch, length, steps, costs, tau, share, rows, recommendation, choice)
    # 4. decide: from the trial's measurements where it ran
    return _decided(advice, trials, trial, note)


def _steps(loader: Iterable[Any], measurement: Measurement) -> int:
    """The loader batches to time: ``Measurement.steps``, or 32 (fewer for a shorter loader, at least 4)."""
    if measurement.steps is not None:
        return measurement.steps
    length = epoch_length(loader)
    steps = DEFAULT_STEPS if length is None else min(DEFAULT_STEPS, length)
    if steps < 4:
        raise ValueError(f"advise needs at least 4 loader batches to measure; this loader has {length}")
    return steps


def _check_model_and_trial(model: nn.Module, training: Training, measurement: Measurement) -> None:
    """Refuse what cannot run, naming the fix: a trial without an optimizer; a model that cannot be copied."""
    if measurement.trial_steps and not training.has_optimizer:
        raise ValueError(
            "Measurement(trial_steps=) needs your optimizer to train the options on copies: pass "
            "training=Training(optimizer=<your optimizer>) (its state is copied) or Training(make_optimizer=)"
        )
    if any(kind.__name__ in ("FullyShardedDataParallel", "FSDPModule") for kind in type(model).__mro__):
        raise ValueError(
            "advise trains copies of the model in this process alone, and an FSDP-sharded model cannot be copied: "
            "call it on an unsharded model (e.g. on one rank, before sharding)"
        )


def _decided(advice: Advice, trials: list[dict[str, Any]], steps: int, note: str) -> Advice:
    """``advice`` with the branch trial's measurements: a ``"measured"`` column and the measured recommendation."""
    advice = dataclasses.replace(advice, trial_steps=steps if trials else 0, trial=trials, trial_note=note)
    if not trials:
        if note.startswith("no branch trial"):
            return dataclasses.replace(advice, recommendation=f"{advice.recommendation}; {note}")
        return advice
    measured = {row["option"]: row["speedup"] for row in trials}
    rows = [{**row, "measured": None if row["cache"] else measured.get(trial_name(row))} for row in advice.rows]
    recommendation, choice = measured_recommendation(trials, rows)
    named = next((row["option"] for row in rows if not row["cache"] and trial_name(row) == choice), choice)
    short = caution(steps)
    if short:
        recommendation += f"; {short}"
    return dataclasses.replace(advice, rows=rows, recommendation=recommendation, choice=named)
