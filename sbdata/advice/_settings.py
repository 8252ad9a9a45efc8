"""``advise``'s settings in three groups, each checked when it is built: how its copies of the model train
(:class:`Training`), which options it prices and trials (:class:`Candidates`), and how it measures
(:class:`Measurement`)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sbdata.auto import CostTable
from sbdata.scoring import SCORES

__all__ = ["Candidates", "Measurement", "Training"]

TrainStep = Callable[[nn.Module, torch.optim.Optimizer, Any, Any], Any]
"""``train_step(model, optimizer, inputs, targets)``: one training step as the user takes it."""


@dataclass(frozen=True)
class Training:
    """How ``advise`` trains its copies of the model (the timed steps and each option of the trial).

    Attributes:
        optimizer: the user's optimizer of the model: each copy's optimizer is of its class and hyper-parameters,
            its state (moments, step counts) loaded, so the copies train as the user's run would now. Needed for
            the trial. Default None.
        make_optimizer: ``make_optimizer(model) -> optimizer`` instead (e.g.
            ``lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)``); not with ``optimizer``. Default None.
            Without either, the timed steps use SGD at learning rate 0 and there is no trial.
        train_step: ``train_step(model, optimizer, inputs, targets)``: one training step as the user takes it (AMP
            with a ``GradScaler``, gradient clipping, accumulation), called with each option's samples. Default
            None: ``zero_grad``, the mean per-sample loss, ``backward``, ``step``.

    Raises:
        ValueError: for both ``optimizer`` and ``make_optimizer``.
        TypeError: for a ``train_step`` or ``make_optimizer`` that is not callable.
    """

    optimizer: torch.optim.Optimizer | None = None
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None
    train_step: TrainStep | None = None

    def __post_init__(self) -> None:
        if self.optimizer is not None and self.make_optimizer is not None:
            raise ValueError(
                "pass Training(make_optimizer=) or Training(optimizer=), not both: optimizer= copies your optimizer "
                "and its state"
            )
        if self.make_optimizer is not None and not callable(self.make_optimizer):
            kind = type(self.make_optimizer).__name__
            raise TypeError(f"Training.make_optimizer must be callable(model) -> optimizer, got {kind}")
        if self.train_step is not None and not callable(self.train_step):
            kind = type(self.train_step).__name__
            raise TypeError(f"Training.train_step must be callable(model, optimizer, inputs, targets), got {kind}")

    @property
    def has_optimizer(self) -> bool:
        """Whether the copies train with the user's optimizer (or factory): what the trial needs."""
        return self.optimizer is not None or self.make_optimizer is not None

    def factory(self, model: nn.Module) -> Callable[[nn.Module], torch.optim.Optimizer]:
        """``copy -> optimizer`` for a deep copy of ``model``: a copy of the user's optimizer (state included), the
        user's factory, or SGD at learning rate 0."""
        user = self.optimizer
        if user is not None:
            return lambda copy_: copy_optimizer(user, model, copy_)
        return self.make_optimizer or (lambda copy_: torch.optim.SGD(copy_.parameters(), lr=0.0))


@dataclass(frozen=True)
class Candidates:
    """Which options ``advise`` prices and trials.

    Attributes:
        keeps: the shares of each loader batch to keep, each in (0, 1]: each is priced as a fixed ``keep=``, with
            and without a ``LossCache``, and as the smaller batch ``ceil(keep * B)`` on every sample; the trial
            trains top-k, its control ``random`` and the smaller batch at each share below 1. Default
            (0.25, 0.5, 0.75).
        staleness: the ``LossCache`` staleness (epochs) to price; a cache then scores about
            ``1 / (staleness + 1)`` of the samples. An int >= 0. Default 2.
        score: ``"loss"`` or ``"gradnorm"``: what the spread is measured on (as the loader's ``score=``). Default
            ``"loss"``.

    Raises:
        ValueError: for a share outside (0, 1], a negative ``staleness`` or an unknown ``score``.
    """

    keeps: tuple[float, ...] = (0.25, 0.5, 0.75)
    staleness: int = 2
    score: str = "loss"

    def __post_init__(self) -> None:
        keeps = self.keeps
        if (
            isinstance(keeps, (str, bytes))
            or not isinstance(keeps, Iterable)
            or not (keeps := tuple(keeps))
            or any(isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1 for k in keeps)
        ):
            raise ValueError(f"keeps must be shares in (0, 1], e.g. (0.25, 0.5), got {self.keeps!r}")
        object.__setattr__(self, "keeps", keeps)  # a list given is held as a tuple
        staleness = self.staleness
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"staleness must be an int >= 0 (epochs a cached loss stays usable), got {staleness!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {self.score!r}")


@dataclass(frozen=True)
class Measurement:
    """How ``advise`` measures.

    Attributes:
        steps: loader batches to time, an int >= 4. Default None: 32, or ``len(loader)`` if the loader is shorter
            (at least 4); the number used is ``Advice.steps``.
        trial_steps: loader batches each option of the *branch trial* trains: from the model as it is, each on its
            own copy of the model and of the optimizer, over the same batches, measured on the probe every
            ``trial_steps // 8`` batches (memory: a copy of the model and optimizer per option, one batch held).
            An int >= 8, or 0 for none. Default None: 1024 with an optimizer (on the benchmark suites, shorter
            trials measured less of top-k's win: every option falls behind whole batches at first); without
            ``probe``, what one epoch holds after the timed steps and the probe (at least 16, else no trial;
            ``Advice.trial_note`` says which); none without an optimizer.
        probe: held-out batches the trial measures on (a validation loader; never the test split), read once.
            Default None: the 8 loader batches after the timed ones, which no option trains on (the trial then
            fits in what is left of one epoch).
        costs: a fixed :class:`~sbdata.CostTable` instead of timing (tests; a calibrated table); the spread of the
            losses is measured anyway. Default None.
        clock: seconds, for the timing. Default None: ``time.thread_time`` on the CPU, ``time.perf_counter`` after
            a synchronisation on an accelerator.

    Raises:
        ValueError: for ``steps`` not an int >= 4, or ``trial_steps`` not an int >= 8 (or 0).
    """

    steps: int | None = None
    trial_steps: int | None = None
    probe: Iterable[Any] | None = None
    costs: CostTable | None = None
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        steps = self.steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 4):
            raise ValueError(f"steps must be an int >= 4 (loader batches to measure), got {steps!r}")
        trial = self.trial_steps
        if trial is not None:
            valid = isinstance(trial, int) and not isinstance(trial, bool)
            if not valid or not (trial == 0 or trial >= 8):
                raise ValueError(
                    f"trial_steps must be an int >= 8 (loader batches per option), or 0 for no trial; got {trial!r}"
                )


def copy_optimizer(optimizer: torch.optim.Optimizer, model: nn.Module, copy_: nn.Module) -> torch.optim.Optimizer:
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
                f"Training(optimizer=) holds {len(missing)} parameter(s) that are not the model's: pass the optimizer "
                "of the model given, or Training(make_optimizer=)"
            )
        groups.append({**{k: v for k, v in group.items() if k != "params"},
                       "params": [mine[position[id(p)]] for p in group["params"]]})  # fmt: skip
    accepted = inspect.signature(type(optimizer)).parameters
    clone = type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
    clone.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return clone
