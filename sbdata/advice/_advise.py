"""Before training: what selection and a smaller batch can do on *this* run. ``advise`` measures a few dozen steps of
the user's own model.

It times, on the user's device and a copy of the user's model (with a copy of the user's optimizer, state included,
when given), the scoring pass and a training step at the loader's batch size and at a quarter of it (interleaved,
after a warm-up), fits a :class:`~sbdata.CostTable`, measures the spread of the scores (``tau``,
:func:`~sbdata.auto.tau_from_sums`) on those batches, and prices every keep, with and without a ``LossCache``, and
the small-batch control, each as a *range*: from the noise-dominated bound (progress proportional to the batch: the
lowest) to far above the critical batch (progress independent of the batch: only the seconds count). Where a
training run sits in that range, and what a biased policy such as top-k gains or loses, no estimate made before
training can know (``benchmarks/calibration`` measured top-k above the whole range, while random, priced the same,
never reached the user's accuracy): a range that straddles 1 means "measure it", which ``keep="auto"`` does on the
run. The model, its optimizer and the global RNGs are left as they were.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import sbdata.batch as _batch
from sbdata._util import epoch_length, model_device
from sbdata.advice._branch import Arm, Branch, measured_speedup, paired_se, train_once
from sbdata.auto import CostTable, score_sums, small_batch_speedup, speedup_range, tau_from_sums
from sbdata.distributed import scoring_module
from sbdata.policies import keep_count
from sbdata.scoring import Scorer

__all__ = ["Advice", "advise"]

MARGIN = 0.05  # a predicted speed-up must exceed 1 + MARGIN to be recommended (keep="auto"'s default margin)
DEFAULT_TRIAL = 1024  # loader batches per option of the branch trial, with an optimizer (benchmarks/calibration/trial)
MIN_TRIAL = 16  # a default trial shorter than this is not run (too short to outlast the switch's transient)
PROBE_BATCHES = 8  # loader batches held out as the trial's probe when no probe= is given


@dataclass
class Advice:
    """What :func:`advise` measured and predicts.

    Attributes:
        batch: the loader's batch size B.
        batches_per_epoch: loader batches per epoch (``len(loader)``), or None if the loader has no length.
        steps: the loader batches measured.
        costs: the fitted seconds of a scoring pass and of a training step (plus sbdata's overhead).
        tau: the variance-reduction factor of the measured scores (1: a flat spread).
        score_share: the scoring pass's seconds as a share of a plain training step's at B.
        rows: per option, ``{"option", "keep", "cache", "low", "high", "seconds_per_epoch"}``: ``low`` and ``high``
            the predicted speed-up (progress per second against training on whole batches, > 1 pays) at the two
            ends of the range (noise-dominated; far above the critical batch), ``seconds_per_epoch`` the predicted
            seconds of one epoch (None without ``batches_per_epoch``). The option "smaller batch b" is the recipe
            at batch ``b = ceil(keep * B)`` on every sample (its learning rate retuned).
            With a branch trial, ``"measured"``: the option's measured speed-up (None where the trial has no such
            option: the ``LossCache`` rows, whose reuse needs several epochs).
        recommendation: one sentence: what to do, and why, in numbers: from the branch trial where one ran (the
            best measured option, and what the controls say about why), else from the predicted range.
        trial_steps: loader batches each option of the branch trial trained (0: no trial).
        trial: per option of the branch trial, ``{"option", "arm", "keep", "seconds", "start", "end",
            "difference", "se", "speedup", "curve"}``: ``arm`` one of ``"plain"``, ``"topk"``, ``"random"``,
            ``"small"``; ``seconds`` its training seconds over the trial (measured, or priced by ``costs=``);
            ``start`` and ``end`` the probe's mean quality (accuracy for class logits, else minus the per-sample
            loss) before and after; ``difference`` its ``end`` minus plain's at equal loader batches, ``se`` the
            paired standard error of that difference; ``speedup`` plain's seconds to the lower of the two final
            qualities over the option's (> 1: faster; 0.0: it ended no higher than it started); ``curve`` the
            :class:`~sbdata.advice.Curve` of checkpoints.
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
    trial_steps: int = 0
    trial: list[dict[str, Any]] = field(default_factory=list)
    trial_note: str = ""

    def __str__(self) -> str:
        lines = [
            f"batch {self.batch}, {self.steps} batches measured: scoring is {self.score_share:.0%} of a training step; "
            f"tau {self.tau:.2f} (1: the losses are spread flat)",
            "speed-up: predicted progress per second against whole batches (> 1 pays), from the noise-dominated "
            "bound (low) to far above the critical batch (high); s/epoch: predicted seconds per epoch",
            f"{'option':<36}{'low':>7}{'high':>7}{'s/epoch':>10}",
        ]
        if self.trial:
            lines[-1] += f"{'measured':>10}"
        for row in self.rows:
            seconds = "" if row["seconds_per_epoch"] is None else f"{row['seconds_per_epoch']:.2f}"
            line = f"{row['option']:<36}{row['low']:>6.2f}x{row['high']:>6.2f}x{seconds:>10}"
            if self.trial:
                line += f"{_times(row.get('measured')):>10}"
            lines.append(line)
        if self.trial:
            lines += [
                f"branch trial: each option trained {self.trial_steps} loader batches on its own copy of your model "
                "and optimizer, from the model as it is; quality: the probe's accuracy (class logits) or minus its "
                "loss; measured: whole batches' seconds to the lower of the two final qualities over the option's "
                "(> 1 pays); vs plain: final quality minus whole batches' at equal batches, +- its paired se",
                f"{'option':<36}{'seconds':>9}{'start':>9}{'end':>9}{'vs plain':>18}{'measured':>10}",
            ]
            for row in self.trial:
                versus = "" if row["arm"] == "plain" else f"{row['difference']:+.4f} +- {row['se']:.4f}"
                lines.append(f"{row['option']:<36}{row['seconds']:>9.3f}{row['start']:>9.4f}{row['end']:>9.4f}"
                             f"{versus:>18}{_times(row['speedup']):>10}")  # fmt: skip
        if self.trial and self.trial_note:
            lines.append(self.trial_note)
        return "\n".join([*lines, self.recommendation])


def _times(value: float | None) -> str:
    if value is None:
        return ""
    if value == 0:
        return "never"
    return f"{value:.2f}x" if math.isfinite(value) else "inf"


def advise(
    loader: Iterable[Any],
    model: nn.Module,
    loss_fn: Any,
    *,
    steps: int | None = None,
    keeps: tuple[float, ...] = (0.25, 0.5, 0.75),
    staleness: int = 2,
    score: str = "loss",
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    trial_steps: int | None = None,
    probe: Iterable[Any] | None = None,
    train_step: Callable[[nn.Module, torch.optim.Optimizer, Any, Any], Any] | None = None,
    split: Callable[[Any], tuple[Any, Any]] | None = None,
    forward: Callable[[nn.Module, Any], Any] | None = None,
    reduce: Callable[[torch.Tensor, Any], torch.Tensor] | None = None,
    device: torch.device | str | None = None,
    costs: CostTable | None = None,
    clock: Callable[[], float] | None = None,
) -> Advice:
    """Measure ``steps`` loader batches of the user's model and say what selection and a smaller batch can do.

    Args:
        loader: the training loader (any iterable of batches); ``steps`` batches are read from a new iterator.
        model: the user's model as it is (at the start, or mid-training); it is copied for the training steps, and
            scored in place without side effects.
        loss_fn: the per-sample loss (as for :class:`~sbdata.SBLoader`).
        steps: loader batches to measure, an int >= 4. Default None: 32, or ``len(loader)`` if the loader is
            shorter (at least 4); the number used is ``Advice.steps``.
        keeps: the fixed shares to price, each in (0, 1]. Default (0.25, 0.5, 0.75).
        staleness: the ``LossCache`` staleness (epochs) to price; a cache then scores about ``1 / (staleness + 1)``
            of the samples. Default 2.
        score: ``"loss"`` or ``"gradnorm"``: what the spread is measured on (as ``score=``). Default ``"loss"``.
        make_optimizer: ``make_optimizer(model) -> optimizer``, the convention of the examples (e.g.
            ``lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)``), for the timed training steps on the copy;
            its step costs seconds too. Default None: a copy of ``optimizer``, else SGD at learning rate 0.
        optimizer: the user's optimizer of ``model``: the copy's optimizer is of its class and hyper-parameters,
            its state (moments, step counts) loaded, so the timed steps are the user's as they are now. Not with
            ``make_optimizer``.
        trial_steps: loader batches each option of the *branch trial* trains (``sbdata.advice._branch``): from
            the model as it is, each on its own copy of the model and of the optimizer (``optimizer=``, state
            included, or ``make_optimizer=``) over the same batches, measured on the probe every
            ``trial_steps // 8`` batches. The options: whole batches, top-k and its control ``random`` at each
            share of ``keeps``, and the smaller batch ``ceil(keep * B)`` at your learning rate. They step in turn
            on each batch as it arrives (memory: a copy of the model and optimizer per option, one batch held).
            An int >= 8, or 0 for none. Default None: 1024 with an optimizer (on the benchmark suites, shorter
            trials measured less of top-k's win: the switch's transient); without ``probe=``, what one epoch holds after
            the timed steps and the probe (at least 16, else no trial; ``Advice.trial_note`` says which, and a
            recommendation from a trial under 1024 says it may be the transient); none without an optimizer.
        probe: held-out batches the trial measures on (a validation loader; never your test split), read once.
            Default None: the :data:`PROBE_BATCHES` loader batches after the timed ones, which no branch trains
            on (the trial then fits in what is left of one epoch).
        train_step: ``train_step(model, optimizer, inputs, targets)``: one training step as you take it (AMP with a
            ``GradScaler``, gradient clipping, accumulation), for the timed steps (on the copy) and the trial (on
            each branch's copies, with the option's samples), so both time and train your step. Default None:
            ``zero_grad``, the mean per-sample loss, ``backward``, ``step``.
        split: ``split(batch) -> (inputs, targets)``; default as :class:`~sbdata.SBLoader`'s.
        forward: ``forward(model, inputs) -> outputs``, as :class:`~sbdata.SBLoader`'s (e.g. ``m(x).logits``);
            default ``model(inputs)``. Used by the scores, the default training step and the probe's quality.
        reduce: ``reduce(losses, targets) -> (B,)`` for per-token losses, as :class:`~sbdata.SBLoader`'s; default
            the mean over the non-batch dimensions. ``**sbdata.tasks.causal_lm()`` passes ``split``, ``forward``,
            ``loss_fn`` and ``reduce`` together: the probe's quality is then minus nats per token.
        device: where to run; default the model's.
        costs: a fixed cost table instead of timing (tests; a calibrated table); the spread is measured anyway.
        clock: seconds, for the timing; default ``time.thread_time`` on the CPU, ``time.perf_counter`` after a
            synchronisation on an accelerator.

    Raises:
        ValueError: for ``steps`` below 4 (or a loader of fewer than 4 batches), a share outside (0, 1], a
            negative ``staleness``, both optimizer arguments, or a loader that ends before ``steps`` batches;
            for ``trial_steps`` not an int >= 8 (or 0), given without an optimizer, or more than one epoch holds
            without ``probe=``; for a ``probe`` without batches.
    """
    if steps is None:
        length = epoch_length(loader)
        steps = 32 if length is None else min(32, length)
        if steps < 4:
            raise ValueError(f"advise needs at least 4 loader batches to measure; this loader has {length}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 4:
        raise ValueError(f"steps must be an int >= 4 (loader batches to measure), got {steps!r}")
    if not keeps or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1 for k in keeps):
        raise ValueError(f"keeps must be shares in (0, 1], e.g. (0.25, 0.5), got {keeps!r}")
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness must be an int >= 0 (epochs a cached loss stays usable), got {staleness!r}")
    if make_optimizer is not None and optimizer is not None:
        raise ValueError("pass make_optimizer= or optimizer=, not both: optimizer= copies your optimizer and its state")
    has_optimizer = optimizer is not None or make_optimizer is not None
    if trial_steps is not None:
        valid = isinstance(trial_steps, int) and not isinstance(trial_steps, bool)
        if not valid or not (trial_steps == 0 or trial_steps >= 8):
            raise ValueError(f"trial_steps must be an int >= 8 (loader batches per option), or 0 for no trial; got "
                             f"{trial_steps!r}")  # fmt: skip
        if trial_steps and not has_optimizer:
            raise ValueError("trial_steps needs your optimizer to train the options on copies: pass optimizer= (its "
                             "state is copied) or make_optimizer=")  # fmt: skip
    if any(kind.__name__ in ("FullyShardedDataParallel", "FSDPModule") for kind in type(model).__mro__):
        raise ValueError(
            "advise trains copies of the model in this process alone, and an FSDP-sharded model cannot be copied: "
            "call it on an unsharded model (e.g. on one rank, before sharding)"
        )
    if train_step is not None and not callable(train_step):
        kind = type(train_step).__name__
        raise TypeError(f"train_step must be callable(model, optimizer, inputs, targets), got {kind}")
    model = scoring_module(model)  # a DDP model: its module (the same parameters), trialled in this process alone
    place = torch.device(device) if device is not None else model_device(model)
    scorer = Scorer(loss_fn, forward=forward, reduce=reduce, score=score)
    split_fn = split if split is not None else _batch.default_split
    timer = clock if clock is not None else _default_clock(place)
    trainee = copy.deepcopy(model).to(place)
    if optimizer is not None:
        user_optimizer = optimizer
        factory: Callable[[nn.Module], torch.optim.Optimizer] = lambda m: _copy_optimizer(user_optimizer, model, m)  # noqa: E731
    else:
        factory = make_optimizer or (lambda m: torch.optim.SGD(m.parameters(), lr=0.0))
    trained = factory(trainee)
    seconds: dict[str, dict[int, list[float]]] = {"score": {}, "train": {}}
    sums = torch.zeros(3, dtype=torch.float64, device=place)
    batch_size = 0
    with torch.random.fork_rng(devices=[place] if place.type == "cuda" else []):
        batches = iter(loader)
        for index in range(steps):
            batch = next(batches, None)
            if batch is None:
                raise ValueError(f"the loader ended after {index} batches: pass steps <= {index}")
            inputs, targets = split_fn(_batch.to_device(batch, place))
            n = _batch.sample_count(inputs) or 0
            batch_size = max(batch_size, n)
            small = max(1, n // 4)
            for size in (n, small) if index % 2 == 0 else (small, n):
                sub = torch.arange(size, device=place)
                x, y = _batch.select(inputs, sub), _batch.select(targets, sub)
                started = timer()
                scores = scorer(model, x, y, size, place)
                _record(seconds["score"], size, timer() - started, index, steps)
                if size == n:
                    sums = sums + score_sums(scores).to(sums.device)
                started = timer()
                train_once(trainee, trained, scorer, x, y, train_step)
                _record(seconds["train"], size, timer() - started, index, steps)
        del trainee, trained  # the timed copy: the trial's branches copy the user's model afresh
        length = epoch_length(loader)
        trial, note = _trial_size(trial_steps, has_optimizer, probe is not None, length, steps)
        trials: list[dict[str, Any]] = []
        if trial:

            def prepare(batch: Any) -> tuple[Any, Any]:
                return split_fn(_batch.to_device(batch, place))

            held_out = _probe(probe, batches, prepare)
            chosen = _trial_batches(loader, batches, trial, probe is not None)
            trials = _branch_trial(
                model, factory, chosen, trial, held_out, keeps, train_step=train_step, prepare=prepare,
                scorer=scorer, device=place, timer=timer, costs=costs, batch=batch_size,
            )  # fmt: skip
    total, squares, count = sums.tolist()
    measured_tau = tau_from_sums(total, squares, count) if count else 1.0
    table = costs if costs is not None else CostTable.fit(_medians(seconds["score"]), _medians(seconds["train"]))
    advice = _advice(loader, batch_size, steps, table, measured_tau, keeps, staleness, score)
    return _with_trial(advice, trials, trial, note)


def _trial_size(
    asked: int | None, has_optimizer: bool, has_probe: bool, length: int | None, steps: int
) -> tuple[int, str]:
    """The trial's loader batches per option, and why there is none (or fewer) where that needs saying."""
    if asked == 0 or (asked is None and not has_optimizer):
        why = "" if asked == 0 else "no branch trial: pass optimizer= (your optimizer) to measure the options"
        return 0, why
    wanted = asked if asked is not None else DEFAULT_TRIAL
    room = None if has_probe or length is None else length - steps - PROBE_BATCHES
    if room is None or wanted <= room:
        return wanted, ""
    if asked is not None:
        raise ValueError(
            f"trial_steps={asked} does not fit in one epoch of {length} loader batches after the {steps} timed ones "
            f"and the {PROBE_BATCHES} probe batches: pass probe= (held-out batches, e.g. a validation loader; never "
            f"your test split) to trial over several epochs, or trial_steps <= {max(room, 0)}"
        )
    if room < MIN_TRIAL:
        return 0, (
            f"no branch trial: one epoch of {length} loader batches leaves {max(room, 0)} after the timed ones and "
            f"the probe's, under {MIN_TRIAL}: pass probe= (held-out batches) to trial over several epochs"
        )
    return room, f"a branch trial of {room} loader batches per option (what one epoch leaves; pass probe= for more)"


def _caution(steps: int) -> str:
    """What a trial shorter than the default may have measured instead of the option ("" for a long enough one)."""
    if steps >= DEFAULT_TRIAL:
        return ""
    return (
        f"measured over {steps} loader batches per option only: on the benchmark suites, shorter trials measured less "
        f"of top-k's win (the switch's transient: every option falls behind whole batches at first) and agreed with "
        f"whole runs on 5 (128 batches) and 7 (512) of 12 early calls, {DEFAULT_TRIAL} on 10 "
        f"(trial_steps={DEFAULT_TRIAL}; beyond one epoch it needs probe=)"
    )


def _probe(probe: Iterable[Any] | None, batches: Iterator[Any], prepare: Callable[[Any], tuple[Any, Any]]
           ) -> list[tuple[Any, Any]]:  # fmt: skip
    """The held-out batches on the device: ``probe``'s, or the next :data:`PROBE_BATCHES` of the loader's."""
    source: Iterable[Any] = probe if probe is not None else itertools.islice(batches, PROBE_BATCHES)
    held_out = [prepare(batch) for batch in source]
    if not held_out:
        raise ValueError("probe= yielded no batches: pass held-out batches (e.g. a validation loader)")
    if probe is None and len(held_out) < PROBE_BATCHES:
        raise ValueError("the loader ended inside the trial's probe: pass probe= or trial_steps=0")
    return held_out


def _trial_batches(loader: Iterable[Any], batches: Iterator[Any], count: int, new_epochs: bool) -> Iterator[Any]:
    """The trial's ``count`` loader batches as the loader yields them, one at a time: the rest of this epoch, then
    (with a probe of its own) new epochs."""
    for got in range(count):
        batch = next(batches, None)
        if batch is None:
            if not new_epochs:
                raise ValueError(
                    f"the loader ended after {got} of the trial's {count} batches: pass probe= (held-out batches) "
                    "to trial over several epochs, or a smaller trial_steps"
                )
            batches = iter(loader)
            batch = next(batches, None)
            if batch is None:
                raise ValueError("the loader yields nothing on a new epoch: pass trial_steps=0")
        yield batch


def _branch_trial(
    model: nn.Module,
    factory: Callable[[nn.Module], torch.optim.Optimizer],
    chosen: Iterator[Any],
    steps: int,
    held_out: list[tuple[Any, Any]],
    keeps: tuple[float, ...],
    *,
    train_step: Callable[[nn.Module, torch.optim.Optimizer, Any, Any], Any] | None,
    prepare: Callable[[Any], tuple[Any, Any]],
    scorer: Scorer,
    device: torch.device,
    timer: Callable[[], float],
    costs: CostTable | None,
    batch: int,
) -> list[dict[str, Any]]:
    """Every option's branch, stepped in turn on each batch (the order rotating), and its row against plain's."""
    arms = [Arm("plain")]
    for keep in keeps:
        if keep < 1:
            arms += [Arm("topk", keep), Arm("random", keep), Arm("small", keep)]
    branches = [Branch(arm, model, factory, scorer=scorer, device=device, train_step=train_step) for arm in arms]
    lasts = [branch.measure(held_out) for branch in branches]
    every = max(1, steps // 8)
    for index, raw in enumerate(chosen):
        inputs, targets = prepare(raw)
        turn = index % len(branches)
        for branch in branches[turn:] + branches[:turn]:
            branch.step(inputs, targets, timer, costs)
        if (index + 1) % every == 0 or index + 1 == steps:
            lasts = [branch.measure(held_out) for branch in branches]
    results = [(branch.curve, last) for branch, last in zip(branches, lasts, strict=True)]
    plain_curve, plain_last = results[0]
    rows = []
    for arm, (curve, last) in zip(arms, results, strict=True):
        rows.append({
            "option": arm.name(batch), "arm": arm.kind, "keep": arm.keep, "seconds": curve.seconds[-1],
            "start": curve.quality[0], "end": curve.quality[-1],
            "difference": curve.quality[-1] - plain_curve.quality[-1],
            "se": 0.0 if arm.kind == "plain" else paired_se(last, plain_last),
            "speedup": 1.0 if arm.kind == "plain" else measured_speedup(plain_curve, curve),
            "curve": curve,
        })  # fmt: skip
    return rows


def _copy_optimizer(optimizer: torch.optim.Optimizer, model: nn.Module, copy_: nn.Module) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s class over ``copy_``'s parameters, with its param groups' hyper-parameters
    and its state (``copy_`` a deep copy of ``model``: parameters match by position).

    Raises:
        ValueError: if the optimizer holds a parameter that is not ``model``'s.
    """
    position = {id(p): i for i, p in enumerate(model.parameters())}
    mine = list(copy_.parameters())
    groups = []
    for group in optimizer.param_groups:
        missing = [p for p in group["params"] if id(p) not in position]
        if missing:
            raise ValueError(
                f"optimizer= holds {len(missing)} parameter(s) that are not the model's: pass the optimizer of the "
                "model given, or make_optimizer="
            )
        groups.append({**{k: v for k, v in group.items() if k != "params"},
                       "params": [mine[position[id(p)]] for p in group["params"]]})  # fmt: skip
    accepted = inspect.signature(type(optimizer)).parameters
    clone = type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
    clone.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return clone


def _default_clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":

        def synchronised() -> float:
            torch.cuda.synchronize(device)  # the advisor may wait: it is not a training step
            return time.perf_counter()

        return synchronised
    return time.thread_time


def _record(table: dict[int, list[float]], size: int, value: float, index: int, steps: int) -> None:
    if index >= steps // 4:  # the first quarter warms up (allocator, kernels, caches)
        table.setdefault(size, []).append(value)


def _medians(table: dict[int, list[float]]) -> dict[int, float]:
    return {size: sorted(values)[len(values) // 2] for size, values in table.items()}


def _advice(
    loader: Any,
    batch: int,
    steps: int,
    costs: CostTable,
    tau_: float,
    keeps: tuple[float, ...],
    staleness: int,
    score: str,
) -> Advice:
    per_epoch = epoch_length(loader)
    reuse = staleness / (staleness + 1)
    plain = costs.train(batch)
    rows: list[dict[str, Any]] = [
        {"option": "no selection", "keep": 1.0, "cache": False, "low": 1.0, "high": 1.0, "seconds_per_epoch": plain}
    ]
    for keep in keeps:
        for cached in (False, True):
            r = reuse if cached else 0.0
            step = costs.score(batch) * (1 - r) + costs.train(keep_count(keep, batch)) + costs.overhead
            name = f"keep={keep}" + (f" + LossCache(staleness={staleness})" if cached else "")
            low, high = speedup_range(tau_, keep, batch, costs, r)
            rows.append({"option": name, "keep": keep, "cache": cached, "low": low, "high": high,
                         "seconds_per_epoch": step})  # fmt: skip
    for keep in sorted({k for k in keeps if k < 1}):
        small = keep_count(keep, batch)
        low, high = small_batch_speedup(keep, batch, costs), small_batch_speedup(keep, batch, costs, 0.0)
        rows.append({"option": f"smaller batch {small} (no selection)", "keep": keep, "cache": False, "low": low,
                     "high": high, "seconds_per_epoch": costs.train(small) * batch / small})  # fmt: skip
    for row in rows:
        row["seconds_per_epoch"] = None if per_epoch is None else row["seconds_per_epoch"] * per_epoch
    share = costs.score(batch) / plain
    selection = [row for row in rows[1:] if not row["option"].startswith("smaller batch")]
    smaller = [row for row in rows if row["option"].startswith("smaller batch")]
    best = max(selection, key=lambda row: (row["low"], row["high"]))
    policy = 'policy="importance", score="gradnorm", return_weights=True' if score == "gradnorm" else "the default"
    spread = "flat" if tau_ < 1.2 else "concentrated"
    if best["low"] > 1 + MARGIN:
        text = (
            f"select: {best['option']} ({policy}) is predicted {best['low']:.2f}x-{best['high']:.2f}x the progress "
            f"per second of whole batches (tau {tau_:.2f}); keep='auto' checks it on your run"
        )
    elif max(row["high"] for row in selection) < 1:
        text = (
            f"train on whole batches: even where only seconds count, the best option, {best['option']}, is "
            f"predicted {max(row['high'] for row in selection):.2f}x (scoring is {share:.0%} of a step)"
        )
    else:
        text = (
            f"measure it: {best['option']} is predicted {best['low']:.2f}x-{best['high']:.2f}x (scoring is "
            f"{share:.0%} of a step, the spread {spread}, tau {tau_:.2f}); where in that range your run sits, and "
            "what top-k gains on your data, only a measurement tells: keep='auto' trials it on your run"
        )
    if smaller:
        top = max(smaller, key=lambda row: row["high"])
        text += (
            f"; a smaller batch may do as well without scoring: {top['option']} is predicted "
            f"{top['low']:.2f}x-{top['high']:.2f}x (retune its learning rate)"
        )
    return Advice(batch, per_epoch, steps, costs, tau_ if math.isfinite(tau_) else 1.0, share, rows, text)


def _with_trial(advice: Advice, trials: list[dict[str, Any]], steps: int, note: str) -> Advice:
    """``advice`` with the branch trial's measurements: a ``"measured"`` column and the measured recommendation."""
    advice.trial_steps, advice.trial, advice.trial_note = (steps if trials else 0), trials, note
    if not trials:
        if note.startswith("no branch trial"):
            advice.recommendation += f"; {note}"
        return advice
    measured = {row["option"]: row["speedup"] for row in trials}
    for row in advice.rows:
        row["measured"] = None if row["cache"] else measured.get(_trial_name(row))
    advice.recommendation = _measured_recommendation(trials, advice.rows)
    caution = _caution(steps)
    if caution:
        advice.recommendation += f"; {caution}"
    return advice


def _trial_name(row: dict[str, Any]) -> str:
    """The branch trial's name for a predicted row's option (the cached rows have none)."""
    if row["option"] == "no selection":
        return "no selection"
    if row["option"].startswith("smaller batch"):
        return row["option"].removesuffix(" (no selection)")
    return f"top-k keep={row['keep']:g}"


def _pays(row: dict[str, Any]) -> bool:
    """Measured faster than whole batches by ``MARGIN``, and not behind them at the end by more than one paired se."""
    se = row["se"] if math.isfinite(row["se"]) else 0.0
    return row["speedup"] >= 1 + MARGIN and row["difference"] >= -se


def _measured_recommendation(trials: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """What to do, from the branch trial: the best option that measured a gain (top-k or a smaller batch), what its
    controls measured (so the sentence says which effect the gain comes from), and its predicted range beside."""

    def predicted(option: str) -> str:
        for row in rows:
            if _trial_name(row) == option and not row["cache"]:
                return f"predicted {row['low']:.2f}x-{row['high']:.2f}x"
        return "not predicted"

    def said(row: dict[str, Any]) -> str:
        return f"{row['option']} {_times(row['speedup'])} ({row['difference']:+.4f} +- {row['se']:.4f} at the end)"

    candidates = [row for row in trials if row["arm"] in ("topk", "small") and _pays(row)]
    if not candidates:
        best = max((row for row in trials if row["arm"] != "plain"), key=lambda row: row["speedup"], default=None)
        text = "train on whole batches: no option measured 1.05x the speed of whole batches and ended level with them"
        return text + (f" (best measured: {said(best)})" if best is not None else "")
    best = max(candidates, key=lambda row: row["speedup"])
    text = (
        f"measured: {best['option']} at {_times(best['speedup'])} the speed of whole batches to the trial's common "
        f"quality ({best['difference']:+.4f} +- {best['se']:.4f} at the end; {predicted(best['option'])})"
    )
    level = best["speedup"] / (1 + MARGIN)
    if best["arm"] == "topk":
        small = [row for row in trials if row["arm"] == "small" and _pays(row) and row["speedup"] >= level]
        random = [row for row in trials if row["arm"] == "random" and row["keep"] == best["keep"]]
        if small:
            top = max(small, key=lambda row: row["speedup"])
            text += f"; a smaller batch does as well without scoring: {said(top)} at your learning rate (retune it)"
        elif random and _pays(random[0]) and random[0]["speedup"] >= level:
            text += f"; which samples matters little here: its control {said(random[0])} does as well"
        else:
            controls = [
                said(row) for row in trials if row["arm"] in ("random", "small") and row["keep"] == best["keep"]
            ]
            text += f"; selection beats both controls ({'; '.join(controls)})"
        return text + "; keep='auto' checks it again on your run"
    tops = [row for row in trials if row["arm"] == "topk"]
    if tops:
        text += f"; the best selection option measured {said(max(tops, key=lambda row: row['speedup']))}"
    return text + "; retune the smaller batch's learning rate"
