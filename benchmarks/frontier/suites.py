"""The frontier suites: data, model, the user's recipe, the grids and the pre-registered budgets of each.

Every suite grids plain training at its plain batches (MNIST-1D: {64, 128, 256}) x LR {1/3, 1, 2} x the recipe's
(widened where the best LR sat at the top) over its plain epochs (the frontier), and every selection family at the
same LRs over its selection epochs (fresh top-k also at the suite's ``fresh_batches``; the others at the user's
batch). Budgets are pre-registered as shares of the user's recipe's priced seconds. The ``continued-lm`` suite is the
language model's (``domain="lm"``: the ByteLM and its recipe, :mod:`.lm`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.harness.models import RECIPES

from .arms import BudgetArm

BUDGETS = (0.25, 0.5, 1.0)
KEEP = 0.25  # the controls' keep (random) and the other policies'
LM_RECIPE = {"lr": 2e-3, "weight_decay": 0.01, "batch": 16}  # the continued ByteLM's: AdamW (0.9, 0.95), one-cycle


@dataclass(frozen=True)
class Suite:
    """One frontier suite.

    Attributes:
        name: the suite's folder under ``results/frontier``.
        family: the model family (``harness.models``), its recipe the user's.
        continued: pretrained on part of the data and continued on the mix (``data.mix``); else from scratch
            (``data.scratch``).
        reference_epochs: the user's recipe's epochs (its priced seconds are the budgets' 1x).
        plain_epochs: the frontier grid's epochs.
        sb_epochs: the selection families' epochs.
        lr_multipliers: the LR grid, as multiples of the recipe's LR (every family gets the same); widened where the
            best LR sat at the grid's edge.
        wider: more LR multipliers, for plain training and the families in ``wider_families`` only (the best
            selection configurations): where the frontier's best LR sat at the top of ``lr_multipliers``.
        wider_families: the selection families ``wider`` applies to besides plain.
        noise: the share of training labels flipped (from scratch only; the test labels stay clean). Default 0.
        domain: ``"mnist1d"`` (the family's model, accuracy) or ``"lm"`` (the ByteLM on the standard library and its
            documentation, nats per byte; ``family`` must be ``"bytelm"``). Default ``"mnist1d"``.
        plain_batches: the frontier grid's batch sizes. Default (64, 128, 256).
        fresh_batches: fresh top-k's batch sizes besides the user's. Default (128,).
        plain_wider: more LR multipliers for plain training alone (the frontier), where its best LR sat at the top
            of ``lr_multipliers`` and ``wider`` while no selection family's did. Default none.
        narrow_families: families run at the recipe's LR only (the grid's cost kept down where a family is a
            control of a control). Default none.
        skip: families of the standard list not run in this suite. Default none.
        sampler: adds the free-scored sampler top-k (``sampler-topk-0.25``: a ``PruningSampler`` with the
            ``top_losses`` rule over the losses the training step observes; on the warm cache when continued,
            ``warm-sampler-topk-0.25``). Default False.
        bf16: adds fresh top-k 0.25 scored under bfloat16 autocast (``topk-0.25-bf16``). Default False.
        target: from scratch, the best selection family's pre-registered ratio at every budget (seed mean). Default
            None (the report's 0.8x).
        seed_target: every seed's ratio below this. Default None (the report's 0.9).
    """

    name: str
    family: str
    continued: bool
    reference_epochs: int
    plain_epochs: tuple[int, ...]
    sb_epochs: tuple[int, ...]
    lr_multipliers: tuple[float, ...] = (1 / 3, 1.0, 2.0)
    wider: tuple[float, ...] = ()
    wider_families: tuple[str, ...] = ()
    noise: float = 0.0
    domain: str = "mnist1d"
    plain_batches: tuple[int, ...] = (64, 128, 256)
    fresh_batches: tuple[int, ...] = (128,)
    plain_wider: tuple[float, ...] = ()
    narrow_families: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    sampler: bool = False
    bf16: bool = False
    target: float | None = None
    seed_target: float | None = None

    def __post_init__(self) -> None:
        if self.domain not in ("mnist1d", "lm") or (self.domain == "lm") != (self.family == "bytelm"):
            raise ValueError(f"suite {self.name!r}: domain={self.domain!r} with family={self.family!r}: pass "
                             "domain='lm' with family='bytelm', or 'mnist1d' with a harness.models family")  # fmt: skip
        if self.noise and self.continued:
            raise ValueError(f"suite {self.name!r}: noise= flips labels from scratch only; a continued suite's mix "
                             "has none: pass noise=0.0 or continued=False")  # fmt: skip
        names = [arm.name for arm, _ in self.families()]
        for option in ("wider_families", "narrow_families"):
            unknown = sorted(set(getattr(self, option)) - set(names))
            if unknown:
                raise ValueError(f"suite {self.name!r}: {option} names {unknown}, not among its families: pass "
                                 f"names from {names}")  # fmt: skip

    @property
    def recipe(self) -> dict:
        return dict(LM_RECIPE if self.domain == "lm" else RECIPES[self.family])

    @property
    def lrs(self) -> tuple[float, ...]:
        lr = self.recipe["lr"]
        return tuple(round(lr * m, 6) for m in self.lr_multipliers)

    def families(self) -> list[tuple[BudgetArm, tuple[int, ...]]]:
        """Every arm family with its batch sizes (each at every LR of the grid)."""
        b = self.recipe["batch"]
        out = [
            (BudgetArm("plain"), self.plain_batches),
            (BudgetArm("topk-0.25", policy="topk", keep=0.25), (*self.fresh_batches, b)),
            (BudgetArm("topk-0.5", policy="topk", keep=0.5), (*self.fresh_batches, b)),
        ]
        if self.bf16:
            out.append((BudgetArm("topk-0.25-bf16", policy="topk", keep=0.25, autocast=True), (b,)))
        if self.sampler:  # the sampler's share is the rule's (top 25% plus 10% of the rest); prune= only turns it on
            name = "warm-sampler-topk-0.25" if self.continued else "sampler-topk-0.25"
            out.append((BudgetArm(name, prune=0.5, rule="top_losses", warm=self.continued), (b,)))
        if self.continued:
            out += [
                (BudgetArm("warm-topk-0.25", policy="topk", keep=0.25, warm=True), (b,)),
                (BudgetArm("warm-topk-0.5", policy="topk", keep=0.5, warm=True), (b,)),
                (BudgetArm("warm-prune", warm=True, prune=0.5), (b,)),
                (BudgetArm("warm-topk-0.25+prune", policy="topk", keep=0.25, warm=True, prune=0.5), (b,)),
            ]
        out += [
            (BudgetArm(f"random-{KEEP}", policy="random", keep=KEEP), (b,)),
            (BudgetArm(f"rank-{KEEP}", policy="rank", keep=KEEP), (b,)),
            (BudgetArm(f"importance-{KEEP}", policy="importance", keep=KEEP), (b,)),
            (BudgetArm("auto", policy="default", keep="auto"), (b,)),
        ]
        if self.domain == "lm":  # RHO-LOSS: its hold-out is drawn from both domains (lm.py)
            out.append((BudgetArm(f"reducible-{KEEP}", policy="reducible", keep=KEEP), (b,)))
        if self.continued:
            out.append((BudgetArm("warm-auto", policy="default", keep="auto", warm=True), (b,)))
        return [(arm, batches) for arm, batches in out if arm.name not in self.skip]

    def plan(self, smoke: bool) -> list[tuple[BudgetArm, tuple[int, ...]]]:
        """Every (arm at a batch and LR, its epochs); smoke: two LRs, epochs 1 and 2, the smallest plain batch and
        the user's."""
        lrs = self.lrs
        if smoke:  # two LRs, the recipe's among them
            base = round(self.recipe["lr"], 6)
            lrs = self.lrs[1:3] if base in self.lrs[1:3] else (base, *[lr for lr in self.lrs if lr != base][:1])
        out = []
        for arm, batches in self.families():
            epochs = self.plain_epochs if arm.policy is None and arm.prune is None else self.sb_epochs
            mine = lrs
            if not smoke and (arm.name == "plain" or arm.name in self.wider_families):
                mine = lrs + tuple(round(self.recipe["lr"] * m, 6) for m in self.wider)
            if not smoke and arm.name == "plain":
                mine += tuple(round(self.recipe["lr"] * m, 6) for m in self.plain_wider)
            if arm.name in self.narrow_families:
                mine = (round(self.recipe["lr"], 6),)
            if smoke:
                small = (min(self.plain_batches), self.recipe["batch"])
                epochs, batches = (1, 2), tuple(b for b in batches if b in small)
            out += [(replace(arm, batch=b, lr=lr), epochs) for b in batches for lr in mine]
        return out


SUITES = {  # the frontier's best LR sat at the first grid's top (2x) on every suite: widened for plain and the best
    # selection configurations until the best LR at every budget sat below the grid's top (the ConvNet suites: 4x, 8x,
    # 16x, then 32x, where 16x was best at the smallest budget, and from scratch 64x, where top-k 0.25 was best at 32x;
    # the MLP: 4x and 8x for every family, then 16x and 32x)
    "continued": Suite(
        "continued", "cnn", True, 6, (1, 2, 3, 4, 6), (1, 2, 3, 4, 6, 8, 12),
        wider=(4.0, 8.0, 16.0, 32.0), sampler=True,
        wider_families=("topk-0.25", "topk-0.5", "warm-topk-0.5", f"random-{KEEP}", "warm-sampler-topk-0.25"),
    ),
    "scratch-cnn": Suite(
        "scratch-cnn", "cnn", False, 8, (1, 2, 3, 4, 6, 8), (2, 3, 4, 6, 8, 12),
        wider=(4.0, 8.0, 16.0, 32.0, 64.0), sampler=True,
        wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25"),
    ),
    "scratch-noisy": Suite(  # where selection must not pay: top-k trains on the flipped labels
        "scratch-noisy", "cnn", False, 8, (1, 2, 3, 4, 6, 8), (2, 3, 4, 6, 8, 12),
        wider=(4.0, 8.0, 16.0, 32.0), noise=0.2, sampler=True,
        wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25"),
    ),
    "scratch-mlp": Suite(
        "scratch-mlp", "mlp", False, 16, (2, 4, 6, 8, 12, 16), (2, 4, 6, 8, 12, 16, 24), (1 / 3, 1.0, 2.0, 4.0, 8.0),
        wider=(16.0, 32.0), sampler=True,
        wider_families=("topk-0.25", "topk-0.5", f"random-{KEEP}", "sampler-topk-0.25"),
    ),
    # the compute-bound suite (issue 42): the ConvNet at width 64, where a training step on the kept 64 samples
    # costs about a third of one on 256 (timing.json: plain b=64 / plain b=256); its grid spans the ConvNet suites'
    # best LRs (8-32x) from the recipe's up, one LR grid for every family; pre-registered target: the best
    # selection family at most 0.7x the frontier's seconds at the 1x budget (every seed at most 0.85)
    "scratch-wide": Suite(
        "scratch-wide", "cnn64", False, 8, (1, 2, 4, 6, 8), (2, 4, 6, 8, 12), (1.0, 4.0, 8.0, 16.0, 32.0),
        fresh_batches=(), bf16=True, sampler=True, skip=(f"rank-{KEEP}", f"importance-{KEEP}", "auto"),
        target=0.7, seed_target=0.85,
    ),
    # the ByteLM pretrained on the standard library's code, continued on code and its docs: widened at the top (4x)
    # for plain and the best selection configurations, and at the bottom (0.25x) where top-k's best LR sat at 0.5x;
    # plain's batch grid down to 4, where its best batch sat at the grid's smallest, 8; then plain alone at 8x, where
    # the 1x budget's frontier sat at 4x (every selection family's best LR was at or below the recipe's)
    "continued-lm": Suite(
        "continued-lm", "bytelm", True, 4, (1, 2, 3, 4), (1, 2, 3, 4), (0.5, 1.0, 2.0), domain="lm",
        plain_batches=(4, 8, 16, 32), fresh_batches=(), wider=(4.0, 0.25), plain_wider=(8.0,),
        wider_families=("topk-0.25", "topk-0.5", "warm-topk-0.5", f"random-{KEEP}"),
        narrow_families=(f"rank-{KEEP}", f"importance-{KEEP}", "warm-prune", "auto"),
        skip=("warm-topk-0.25+prune", "warm-auto"),
    ),
}  # fmt: skip
