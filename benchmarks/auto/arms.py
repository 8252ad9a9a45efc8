"""Arms of the "does selection pay?" benchmark (``benchmarks/auto/run.py``): plain recipes and selection, as data.

Every selection arm here uses the shrink layout (each SB batch trains ``ceil(keep * B)`` of its ``B``) and is always
on; importance-sampling arms train on the weighted mean (``return_weights=True``), so their gradient is an unbiased
estimate of the loader batch's. ``keep="auto"`` is sbdata's controller with its defaults (except a long decision
history, for the plot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from benchmarks.harness._sb import Auto, CostTable, SBLoader, Schedule, auto_decisions, trial_order
from benchmarks.harness.arms import OwnRecipe, Probe
from benchmarks.harness.data import ShuffledBatches, inputs_targets
from benchmarks.harness.models import MODELS, RECIPES
from benchmarks.harness.train import train_step

DECISIONS_KEPT = 100_000  # decisions kept by the auto arms: the whole run, for the decisions plot
ONCE = 10**12  # Auto(every=ONCE): the first trial's verdict holds to the end of any run


class Weighted:
    """An SBLoader with ``return_weights=True`` as plain batches: ``(*fields, weights * n)``, so that the weighted
    loss is ``(batch[-1] * per_sample_loss).mean()`` (the weights sum to 1 over a batch of n)."""

    def __init__(self, loader: SBLoader) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self):
        for batch, weights in self.loader:
            yield (*batch, weights * len(weights))


@dataclass(frozen=True)
class SelectArm(OwnRecipe):
    """One configuration at its own batch and LR.

    Attributes:
        name: label in tables and plots.
        batch: loader batch size.
        lr: peak LR of the one-cycle schedule.
        policy: None (plain training), or an sbdata policy name.
        keep: the share kept per SB batch, or ``"auto"``.
        score: ``"loss"`` or ``"gradnorm"`` (sbdata's ``score=``).
        weighted: train on the importance-weighted mean (``return_weights=True``).
        auto: ``keep="auto"`` only: ``Auto`` settings other than the defaults, as ``(name, value)`` pairs (the
            ablations); empty: every setting default.
        before_verdict: a fixed ``keep`` only: what trains for as many loader batches as ``keep="auto"`` with its
            defaults trains plain before its first verdict on this loader (:func:`plain_before_verdict`): ``"plain"``
            whole batches, then selection as ``policy`` and ``keep`` say (what measuring first costs, without the
            trial's switches); ``"select"`` the mirror image, selection, then whole batches to the end (what
            selecting until a first verdict costs where selection loses); None: selection all along.
        first: with ``before_verdict``, the loader batches that phase lasts instead of :func:`plain_before_verdict`,
            an int >= 1 (the ``topk-0.25-after-<n>`` arms: how the bound on measuring first moves with the batch of
            the first verdict); None: as many as ``keep="auto"``'s defaults.
        run: ``keep="auto"`` only: tell it the run's length, ``Auto(run=epochs * batches per epoch)`` (what a
            Schedule's ``total_steps`` tells it), which bounds its trials' harm (``Auto.trial_share``).
    """

    name: str
    batch: int
    lr: float
    policy: str | None = None
    keep: float | str = 1.0
    score: str = "loss"
    weighted: bool = False
    auto: tuple[tuple[str, Any], ...] = ()
    before_verdict: Literal["plain", "select"] | None = None
    first: int | None = None
    run: bool = False

    def build(self, model, split, *, family: str, batch: int, epochs: int, seed: int) -> tuple[Any, Probe]:
        source = ShuffledBatches(split.fields(), self.batch, seed)
        if self.policy is None:
            return source, Probe(len(source))
        keep: Any = self.keep
        if self.keep == "auto":
            length = {"run": epochs * len(source)} if self.run else {}
            keep = Auto(decisions_kept=DECISIONS_KEPT, **length, **dict(self.auto))
        schedule = None
        if self.before_verdict is not None:
            total = epochs * len(source)
            first = plain_before_verdict(len(source)) if self.first is None else self.first
            edge = min(1.0, first / total)  # a short run: one arm to the end
            start, end = (edge, 1.0) if self.before_verdict == "plain" else (0.0, edge)
            schedule = Schedule(start=start, end=end, interrupt=0, total_steps=total)
        loader = SBLoader(
            source, model, F.cross_entropy, keep=keep, policy=self.policy, score=self.score,
            return_weights=self.weighted, generator=seed, nan_policy="keep", split=inputs_targets, schedule=schedule,
        )  # fmt: skip
        probe = Probe(len(source), loader)
        if self.weighted:
            probe.weights = lambda batch: batch[-1]  # type: ignore[attr-defined]
        if self.keep == "auto":
            probe.extra = lambda: _decisions(loader)  # type: ignore[attr-defined]
        return (Weighted(loader) if self.weighted else loader), probe


def _decisions(loader: SBLoader) -> dict[str, Any]:
    """What the controller decided over the run, for the record."""
    return {"auto": auto_decisions(loader.stats, score_share=True)}


def suite_arms(user: dict[str, Any], tuned: dict[str, Any]) -> list[SelectArm]:
    """The arms of one suite: the user's recipe, the tuned baseline, the best fixed SB arm and its random control,
    importance sampling by loss and by gradient norm, and ``keep="auto"`` on importance sampling by gradient norm
    (the estimate's own model) and with the defaults (top-k on the loss), each at the user's batch and LR."""
    b, lr = user["batch"], user["lr"]
    return [
        SelectArm("user", b, lr),
        SelectArm("tuned", tuned["batch"], tuned["lr"]),
        SelectArm("topk-0.25", b, lr, policy="topk", keep=0.25),
        SelectArm("random-0.25", b, lr, policy="random", keep=0.25),
        SelectArm("importance-0.25", b, lr, policy="importance", keep=0.25, weighted=True),
        SelectArm("importance-gradnorm-0.25", b, lr, policy="importance", keep=0.25, score="gradnorm", weighted=True),
        SelectArm("auto", b, lr, policy="importance", keep="auto", score="gradnorm", weighted=True),
        SelectArm("auto-topk", b, lr, policy="topk", keep="auto"),  # keep="auto" with every other option default
    ]


def plain_before_verdict(epoch: int) -> int:
    """Loader batches ``keep="auto"`` with its defaults trains on whole batches before its first verdict, on a loader
    of ``epoch`` batches an epoch: the warm-up, the first trial's plain windows, and the span after the trial in
    which its last window is measured and its sums land (379 at 313 batches an epoch: 64 + 4 x (47 + 16) + 63)."""
    sized = Auto().sized(epoch)
    assert sized.warmup is not None and sized.settle is not None and sized.window is not None
    span = sized.settle + sized.window
    plain_windows = trial_order(len(sized.keeps), sized.cycles).count(0)
    return sized.warmup + plain_windows * span + span


FIRST_VERDICTS = (64, 128, 192, 256)  # loader batches of whole batches before top-k (the topk-0.25-after-<n> arms)


def ablation_arms(user: dict[str, Any]) -> list[SelectArm]:
    """Arms run only when named in ``--arms``.

    - Longer trial windows than the defaults: ``auto-topk-long``, measured and settling parts of 64 each (a trial of
      8 windows of 128 batches outlasts more of the switch's transient); ``auto-topk-long-window``, a measured part
      of 64 after a settling part of 16 (8 windows of 80: is it the averaging or the settling that matters?).
    - What measuring first costs where selection wins: ``auto-topk-once``, the defaults with one trial only (no
      re-trial: what the exit test's trials cost); ``topk-0.25-after-trial``, whole batches for as many loader
      batches as the defaults train plain before the first verdict, then top-k at keep 0.25 to the end (the price of
      those plain batches alone, without the trial's switches or its measuring); ``topk-0.25-until-verdict``, its
      mirror: top-k for those batches, then whole batches (what a design that selects until its first verdict
      would cost where selection loses). (``auto-topk-start-on`` of the ``evals32`` record ran ``Auto(start_on=True)``,
      an option of 61e5216 removed after that record: ``benchmarks/auto/README.md``.)
    - Where the first verdict would have to fall: ``topk-0.25-after-<n>`` for ``n`` in :data:`FIRST_VERDICTS`, whole
      batches for ``n`` loader batches, then top-k at keep 0.25 to the end (``topk-0.25-after-trial`` at other
      first-verdict points: the bound on any measure-plain-first design whose first verdict lands at batch ``n``).
    - The small-batch control ``small-64``: the user's recipe at batch ``ceil(0.25 B)`` (64), its LR unchanged, on
      every sample (why a win at keep 0.25 wins: a smaller batch alone, or the choice of samples).
    - ``auto-topk-run``: ``auto-topk`` told the run's length (``Auto(run=...)``, as a Schedule's ``total_steps``
      would), so that its trials' harm is bounded by the run left (issue 42).
    """
    b, lr = user["batch"], user["lr"]
    return [
        SelectArm("auto-topk-long", b, lr, policy="topk", keep="auto", auto=(("window", 64), ("settle", 64))),
        SelectArm("auto-topk-long-window", b, lr, policy="topk", keep="auto", auto=(("window", 64), ("settle", 16))),
        SelectArm("auto-topk-once", b, lr, policy="topk", keep="auto", auto=(("every", ONCE),)),
        SelectArm("topk-0.25-after-trial", b, lr, policy="topk", keep=0.25, before_verdict="plain"),
        SelectArm("topk-0.25-until-verdict", b, lr, policy="topk", keep=0.25, before_verdict="select"),
        *(
            SelectArm(f"topk-0.25-after-{n}", b, lr, policy="topk", keep=0.25, before_verdict="plain", first=n)
            for n in FIRST_VERDICTS
        ),
        SelectArm(f"small-{math.ceil(0.25 * b)}", math.ceil(0.25 * b), lr),
        SelectArm("auto-topk-run", b, lr, policy="topk", keep="auto", run=True),
    ]


BLOCK, ROUNDS, WARMUP = 32, 41, 2

OFF = CostTable(score_per_sample=1.0, train_per_sample=1.0)  # scoring as dear as training: selection never pays
NEVER = 10**12  # Auto(warmup=NEVER): no trial ever starts, for the per-step cost between trials


class Stepper:
    """One arm's training step, batch after batch, its source restarted when it runs out."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], auto: Auto | None, **options: Any) -> None:
        torch.manual_seed(0)
        self.model = MODELS["cnn"]()
        recipe = RECIPES["cnn"]
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=recipe["lr"], weight_decay=1e-4)
        self.weighted = bool(options.get("return_weights"))
        if auto is None:
            self.source: Any = batches
        else:
            self.source = SBLoader(batches, self.model, F.cross_entropy, keep=auto, **options)
        self.batches = iter(self.source)

    def step(self) -> None:
        batch = next(self.batches, None)
        if batch is None:
            self.batches = iter(self.source)
            batch = next(self.batches)
        if self.weighted:  # the weighted mean, as the importance-sampling arms train
            (x, y), weights = batch
            train_step(self.model, self.optimizer, (x, y, weights * len(weights)), weights=lambda b: b[-1])
        else:
            train_step(self.model, self.optimizer, batch)
