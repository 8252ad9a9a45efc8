"""``advise``'s branch trial: its size, its batches and probe, every option trained side by side
(:class:`~sbdata.advice._branch.Branch`), and the recommendation its measurements support."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from sbdata.advice._branch import Arm, Branch, measured_speedup, paired_se
from sbdata.advice._pricing import MARGIN, times
from sbdata.advice._settings import TrainStep
from sbdata.auto import CostTable
from sbdata.scoring import Scorer

DEFAULT_TRIAL = 1024  # loader batches per option of the branch trial, with an optimizer (benchmarks/calibration/trial)
MIN_TRIAL = 16  # a default trial shorter than this is not run (too short to outlast the switch's transient)
PROBE_BATCHES = 8  # loader batches held out as the trial's probe when no probe= is given


def trial_size(asked: int | None, has_optimizer: bool, has_probe: bool, length: int | None, steps: int
               ) -> tuple[int, str]:  # fmt: skip
    """The trial's loader batches per option, and why there is none (or fewer) where that needs saying.

    Raises:
        ValueError: for an ``asked`` size that does not fit in one epoch without a probe of its own.
    """
    if asked == 0 or (asked is None and not has_optimizer):
        why = "" if asked == 0 else "no branch trial: pass Training(optimizer=<your optimizer>) to measure the options"
        return 0, why
    wanted = asked if asked is not None else DEFAULT_TRIAL
    room = None if has_probe or length is None else length - steps - PROBE_BATCHES
    if room is None or wanted <= room:
        return wanted, ""
    if asked is not None:
        raise ValueError(
            f"Measurement(trial_steps={asked}) does not fit in one epoch of {length} loader batches after the {steps} "
            f"timed ones and the {PROBE_BATCHES} probe batches: pass Measurement(probe=<held-out batches, e.g. a "
            f"validation loader; never your test split>) to trial over several epochs, or trial_steps <= "
            f"{max(room, 0)}"
        )
    if room < MIN_TRIAL:
        return 0, (
            f"no branch trial: one epoch of {length} loader batches leaves {max(room, 0)} after the timed ones and "
            f"the probe's, under {MIN_TRIAL}: pass Measurement(probe=<held-out batches>) to trial over several epochs"
        )
    return room, (f"a branch trial of {room} loader batches per option (what one epoch leaves; pass "
                  "Measurement(probe=) for more)")  # fmt: skip


def caution(steps: int) -> str:
    """What a trial shorter than the default may have measured instead of the option ("" for a long enough one)."""
    if steps >= DEFAULT_TRIAL:
        return ""
    return (
        f"each option trained {steps} loader batches only: at first every option falls behind whole batches, so "
        f"short trials undersell selection (on the benchmark suites, trials agreed with whole runs on 5 of 12 early "
        f"calls at 128 batches, 7 at 512, 10 at {DEFAULT_TRIAL}); for a surer answer pass "
        f"Measurement(trial_steps={DEFAULT_TRIAL}) (beyond one epoch it needs probe=)"
    )


def probe_batches(probe: Iterable[Any] | None, batches: Iterator[Any], prepare: Callable[[Any], tuple[Any, Any]]
                  ) -> list[tuple[Any, Any]]:  # fmt: skip
    """The held-out batches on the device: ``probe``'s, or the next :data:`PROBE_BATCHES` of the loader's.

    Raises:
        ValueError: for a probe without batches, or a loader that ends inside the default probe.
    """
    source: Iterable[Any] = probe if probe is not None else itertools.islice(batches, PROBE_BATCHES)
    held_out = [prepare(batch) for batch in source]
    if not held_out:
        raise ValueError("Measurement(probe=) yielded no batches: pass held-out batches (e.g. a validation loader)")
    if probe is None and len(held_out) < PROBE_BATCHES:
        raise ValueError("the loader ended inside the trial's probe: pass Measurement(probe=) or trial_steps=0")
    return held_out


def trial_batches(loader: Iterable[Any], batches: Iterator[Any], count: int, new_epochs: bool) -> Iterator[Any]:
    """The trial's ``count`` loader batches as the loader yields them, one at a time: the rest of this epoch, then
    (with a probe of its own) new epochs."""
    for got in range(count):
        batch = next(batches, None)
        if batch is None:
            if not new_epochs:
                raise ValueError(
                    f"the loader ended after {got} of the trial's {count} batches: pass Measurement(probe=<held-out "
                    "batches>) to trial over several epochs, or a smaller trial_steps"
                )
            batches = iter(loader)
            batch = next(batches, None)
            if batch is None:
                raise ValueError("the loader yields nothing on a new epoch: pass Measurement(trial_steps=0)")
        yield batch


def run_trial(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    chosen: Iterator[Any],
    steps: int,
    held_out: list[tuple[Any, Any]],
    keeps: tuple[float, ...],
    *,
    train_step: TrainStep | None,
    prepare: Callable[[Any], tuple[Any, Any]],
    scorer: Scorer,
    device: torch.device,
    timer: Callable[[], float],
    costs: CostTable | None,
    batch: int,
) -> list[dict[str, Any]]:
    """Every option's branch, stepped in turn on each batch (the order rotating), and its row against plain's
    (see ``Advice.trial``)."""
    arms = [Arm("plain")]
    for keep in keeps:
        if keep < 1:
            arms += [Arm("topk", keep), Arm("random", keep), Arm("small", keep)]
    branches = [Branch(arm, model, make_optimizer, scorer=scorer, device=device, train_step=train_step)
                for arm in arms]  # fmt: skip
    lasts = [branch.measure(held_out) for branch in branches]
    every = max(1, steps // 8)
    for index, raw in enumerate(chosen):
        inputs, targets = prepare(raw)
        turn = index % len(branches)
        for branch in branches[turn:] + branches[:turn]:
            branch.step(inputs, targets, timer, costs)
        if (index + 1) % every == 0 or index + 1 == steps:
            lasts = [branch.measure(held_out) for branch in branches]
    plain_curve, plain_last = branches[0].curve, lasts[0]
    rows = []
    for arm, branch, last in zip(arms, branches, lasts, strict=True):
        curve = branch.curve
        rows.append({
            "option": arm.name(batch), "arm": arm.kind, "keep": arm.keep, "seconds": curve.seconds[-1],
            "start": curve.quality[0], "end": curve.quality[-1],
            "difference": curve.quality[-1] - plain_curve.quality[-1],
            "se": 0.0 if arm.kind == "plain" else paired_se(last, plain_last),
            "speedup": 1.0 if arm.kind == "plain" else measured_speedup(plain_curve, curve),
            "curve": curve,
        })  # fmt: skip
    return rows


def trial_name(row: dict[str, Any]) -> str:
    """The branch trial's name for a priced row's option (the cached rows have none)."""
    if row["option"] == "no selection":
        return "no selection"
    if row["option"].startswith("smaller batch"):
        return row["option"].removesuffix(" (no selection)")
    return f"top-k keep={row['keep']:g}"


def _pays(row: dict[str, Any]) -> bool:
    """Measured faster than whole batches by ``MARGIN``, and not behind them at the end by more than one paired se."""
    se = row["se"] if math.isfinite(row["se"]) else 0.0
    return row["speedup"] >= 1 + MARGIN and row["difference"] >= -se


def _said(row: dict[str, Any]) -> str:
    """One trial row in words: its speed-up and where it ended against whole batches."""
    return (f"{row['option']} at {times(row['speedup'])} (it ended {row['difference']:+.4f} against whole batches, "
            f"standard error {row['se']:.4f})")  # fmt: skip


def measured_recommendation(trials: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[str, str]:
    """What to do, from the branch trial, and the option it names: the best option that measured a gain (top-k or
    a smaller batch), what its controls measured (so the sentence says which effect the gain comes from), and its
    predicted range beside."""

    def predicted(option: str) -> str:
        for row in rows:
            if trial_name(row) == option and not row["cache"]:
                return f"the price list predicted {row['low']:.2f}x to {row['high']:.2f}x"
        return "not in the price list"

    candidates = [row for row in trials if row["arm"] in ("topk", "small") and _pays(row)]
    if not candidates:
        best = max((row for row in trials if row["arm"] != "plain"), key=lambda row: row["speedup"], default=None)
        text = (f"train on whole batches: no option trained at least {1 + MARGIN:.2f}x as fast as whole batches and "
                "ended level with them")  # fmt: skip
        return text + (f" (the best: {_said(best)})" if best is not None else ""), "no selection"
    best = max(candidates, key=lambda row: row["speedup"])
    text = (
        f"measured: {best['option']} at {times(best['speedup'])} the speed of whole batches to the quality both "
        f"reached (it ended {best['difference']:+.4f} against whole batches, standard error {best['se']:.4f}; "
        f"{predicted(best['option'])})"
    )
    level = best["speedup"] / (1 + MARGIN)
    if best["arm"] == "topk":
        small = [row for row in trials if row["arm"] == "small" and _pays(row) and row["speedup"] >= level]
        random = [row for row in trials if row["arm"] == "random" and row["keep"] == best["keep"]]
        if small:
            top = max(small, key=lambda row: row["speedup"])
            text += f"; a smaller batch does as well without scoring: {_said(top)} at your learning rate (retune it)"
        elif random and _pays(random[0]) and random[0]["speedup"] >= level:
            text += (f"; which samples are kept matters little here: the same share picked at random does as well, "
                     f"{_said(random[0])}")  # fmt: skip
        else:
            controls = [
                _said(row) for row in trials if row["arm"] in ("random", "small") and row["keep"] == best["keep"]
            ]
            text += (f"; picking the hardest samples is what pays: the same share at random and a smaller batch on "
                     f"every sample measured {'; '.join(controls)}")  # fmt: skip
        return text + "; keep='auto' checks it again on your run", best["option"]
    tops = [row for row in trials if row["arm"] == "topk"]
    if tops:
        text += f"; the best selection option measured {_said(max(tops, key=lambda row: row['speedup']))}"
    return text + "; retune the smaller batch's learning rate", best["option"]
